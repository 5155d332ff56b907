"""`tianfeng scale`: one search per batch size, the naive linear-scaling baseline beside each,
and the curve of best accuracy against batch size."""

from tianfeng.callable_module import callable_as

callable_as(__name__, "scale")  # tianfeng.scale(...) is the API call even once this package is imported
