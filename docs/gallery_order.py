"""The examples gallery's order (docs/conf.py, ``within_subsection_order``): the quick demo first.

sphinx-gallery takes the sort key as the fully qualified name of a class (a class defined in
conf.py would make the configuration unpicklable, which Sphinx reports as a warning), so it
lives in this module, which conf.py puts on ``sys.path``.
"""

#: examples shown first, in this order; the others follow by file name
FIRST = ("demo_grid_search.py",)


class ExampleOrder:
    """Sort key of the gallery: ``FIRST`` in their order, then the other files by name."""

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __call__(self, filename):
        if filename in FIRST:
            return (0, FIRST.index(filename), filename)
        return (1, 0, filename)

    def __repr__(self):  # part of sphinx-gallery's cache key of the configuration
        return f"ExampleOrder(first={FIRST})"
