"""The paper's evaluation on the real runtime: `baselines` (B0–B9), `cases` (memory,
preference and AgentDojo cases for the audits), `agentdojo` (its injection pairs as episodes),
`audit` (leak audits and their statistics), the cost law: `bench` (its document), `bench_sessions`
(the short and agent shapes), `bench_sweeps` (in one process), `bench_cross` (across processes),
`bench_plot`, `oracle` (B7-oracle, its labelled comparison that trusts a marking); `bench_store`
(the store at realistic lengths), `demo`."""
