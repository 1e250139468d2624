"""The fork: converted rows judged by the staging model's Great Expectations suite, valid rows
on to the merge and failing rows to ``errors.<table>`` (``expectations``: the suite as SQL;
``split``: the one-pass fork; ``docs``: its Data Docs page)."""
