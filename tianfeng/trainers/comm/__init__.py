"""DDP communication hooks, shaped like PyTorch's `ddp_comm_hooks`: a small state object and a
function `(state, bucket) -> Future[Tensor]`."""
