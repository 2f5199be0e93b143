"""Names, settings, errors and logging shared by every Horus component (imports nothing of Horus)."""
