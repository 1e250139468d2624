"""The merge: a batch's valid rows into the lake and the global index (``index``, held between
batches by ``index_cache``); a small batch's change set is folded on the driver (``changeset``:
the lake model's rules in Python; ``driver``: the rows there and back)."""
