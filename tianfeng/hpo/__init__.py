"""The search (`tianfeng search`): spaces, sampling, the judges of trials (scores, the Pareto
front, pruning), the spec, what the trials say and the running study. Named `hpo`
because `tianfeng.search` is the API's function; the time model it prices recipes with is
`tianfeng.cost`."""
