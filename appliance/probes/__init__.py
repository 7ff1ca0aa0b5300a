"""Probe ports: temporary endpoints hvnet adds to a production bridge (see :mod:`.spec`, :mod:`.lifecycle`)."""
