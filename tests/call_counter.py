"""Counting the calls of one method of a live object, for the tests that
check what a round no longer does (a quiet producer's round, a wake-up)."""


class Calls:
    """Counts the calls of one method of ``obj``: an instance attribute
    shadowing the method, which it calls on."""

    def __init__(self, obj, name):
        self.n = 0
        self.fn = getattr(obj, name)
        setattr(obj, name, self)

    def __call__(self, *args, **kwargs):
        self.n += 1
        return self.fn(*args, **kwargs)
