"""hvnet's terminal UI (Textual).  Screens, dialogs and widgets reach hvnet only through
:mod:`tui.backend`, the console's one door to :mod:`appliance.services` (``make lint`` checks it)."""
