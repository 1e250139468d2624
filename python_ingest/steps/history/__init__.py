"""History tables (``lake.<model>__history``): ``rules`` says what is kept, ``fold`` applies
it to a batch in Python, ``writer`` commits one batch at a time (docs/history.md)."""
