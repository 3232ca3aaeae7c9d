"""The paper's evaluation on the real runtime: `baselines` (B0–B9), `cases` (memory,
preference and AgentDojo cases for the audits), `agentdojo` (its injection pairs as episodes),
`audit` (leak audits and their statistics), `bench` (the cost law), `oracle` (B7-oracle, the cost
law's labelled comparison that trusts a marking), `bench_store` (the store at realistic lengths),
`demo`."""
