"""Modal dialogs: each asks for one intent, shows its plan, and confirms before applying."""
