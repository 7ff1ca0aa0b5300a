"""Front end: the ``hvnet`` command.  Each module parses a verb's arguments, calls a service, renders.

:mod:`.main` builds the parser and dispatches; a verb's module is imported only when the verb runs,
and the modules that declare arguments (``*_args``) load no engine code.
"""
