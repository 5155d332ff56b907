"""HTML reports of studies and scaling curves."""

from tianfeng.callable_module import callable_as

callable_as(__name__, "report")  # tianfeng.report(...) is the API call even once this package is imported
