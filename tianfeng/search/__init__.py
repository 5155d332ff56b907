"""The search: spaces, sampling, proxy trials, pruning, studies and their summaries."""

from tianfeng.callable_module import callable_as

callable_as(__name__, "search")  # tianfeng.search(...) is the API call even once this package is imported
