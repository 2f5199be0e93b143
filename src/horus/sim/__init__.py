"""Trace-driven, event-driven cluster simulator on top of :mod:`horus.scheduler`."""
