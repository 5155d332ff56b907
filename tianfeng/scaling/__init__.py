"""`tianfeng scale`: one search per batch size, the naive linear-scaling baseline beside each,
and the curve of best accuracy against batch size."""
