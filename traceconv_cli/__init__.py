"""The traceconv command line (installed as the ``traceconv_cli`` package)."""
