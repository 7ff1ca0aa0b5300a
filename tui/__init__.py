"""hvnet's terminal UI (Textual).  It talks to the engine only through
``appliance``'s public API: :func:`appliance.connect`, :class:`appliance.LiveInventory`."""
