"""``python -m nbdebug`` verbs, one module each (``add_arguments``, ``run``)."""
