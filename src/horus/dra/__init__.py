"""The Horus DRA driver (``horus dra run``): GPU shares as ResourceClaims the kube-scheduler
allocates. ``docs/dra.md`` describes it."""
