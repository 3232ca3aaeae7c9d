"""Each paper statement → its spec function, its Z3 obligations (and the encoding checks beside
them, which are not proofs), the functions of model/ whose code is checked against a contract
written from it (`unsee prove --code`, proofs/code.py), and the tests that run it: the
property tests, the refinement of the Z3 graph model and the engine's trace validation.

tests/test_manifest.py fails if any name here stops existing, or if a spec function or an
obligation exists that no row mentions.
"""

MANIFEST = (
    {
        "statement": "Lemma 1 (Prefix sharing)",
        "spec": "lemma1_prefix_sharing",
        "proofs": ["lemma1_bounded", "lemma1_inductive"],
        "code": ["unsee.model.session.first_entry"],
        "tests": ["tests/test_reference_machine.py::TestReferenceMachine",
                  "tests/test_statements.py::test_every_statement_holds_on_the_reference"],
    },
    {
        "statement": "Lemma 2 (i) taint monotonicity",
        "spec": "lemma2_taint_monotonicity",
        "proofs": ["lemma2_closure_step"],
        "code": [],
        "tests": ["tests/test_reference_machine.py::TestReferenceMachine",
                  "tests/test_statements.py::test_every_statement_holds_on_the_reference"],
    },
    {
        "statement": "Lemma 2 (ii) certifiable boundary",
        "spec": "lemma2_certifiable_boundary",
        "proofs": ["lemma2_boundary_bounded", "lemma2_taint_queries"],
        "code": ["unsee.model.session.taint_closure", "unsee.model.session.suffix_closure"],
        "tests": ["tests/test_refinement.py::test_z3_closure_refines_the_reference_runtime",
                  "tests/test_refinement.py::test_z3_closure_refines_the_kv_runtime",
                  "tests/test_statements.py::test_every_statement_holds_on_the_reference"],
    },
    {
        "statement": "Theorem 1 (Splicing equivalence)",
        "spec": "theorem1_splicing_equivalence",
        "proofs": ["theorem1_step", "theorem1_bounded"],
        "encoding_checks": ["theorem1_base"],
        "code": ["unsee.model.session.restore"],
        "tests": ["tests/test_traces.py::test_every_forget_of_varied_sessions_follows_the_spec",
                  "tests/test_traces.py::test_a_mutated_engine_is_rejected_by_the_rule_it_breaks",
                  "tests/test_reference_machine.py::TestReferenceMachine",
                  "tests/test_mutants.py::test_mutant_is_caught_with_a_short_trace"],
    },
    {
        "statement": "Theorem 1 through the protocol: graph() and the receipt's τ and T equal the twin's",
        "spec": "protocol_reports_the_twin",
        "proofs": [],
        "code": [],
        "tests": ["tests/test_mutants.py::test_protocol_mutant_is_caught_by_the_default_run",
                  "tests/test_kit.py::test_kit_rejects_mutant_with_a_readable_trace"],
    },
    {
        "statement": "Corollary 1 (Recomputation lower bound and optimality)",
        "spec": "corollary1_optimal_invocations",
        "proofs": ["corollary1_cheaper_shapes_not_exact", "corollary1_any_checkpoint_set"],
        "encoding_checks": ["corollary1_splice_is_exact"],
        "code": ["unsee.model.session.choose_checkpoint"],
        "tests": ["tests/test_traces.py::test_full_reset_and_forced_checkpoint_follow_the_spec",
                  "tests/test_statements.py::test_coarser_checkpoint_costs_T_minus_c",
                  "tests/test_statements.py::test_full_reset_costs_T"],
    },
    {
        "statement": "Assumption A1 (deterministic decoding)",
        "spec": "assumption_a1_deterministic_decoding",
        "proofs": ["a1_needed"],
        "code": [],
        "tests": ["tests/test_statements.py::test_unseeded_sampling_is_reported_as_a1_violation"],
    },
    {
        "statement": "Assumption A2 (sanitized stream = counterfactual stream)",
        "spec": "assumption_a2_sanitized_stream",
        "proofs": ["a2_needed"],
        "code": ["unsee.model.session.sanitize"],
        "tests": ["tests/test_statements.py::test_every_statement_holds_on_the_reference"],
    },
    {
        "statement": "Assumption A3 (no committed side effects after tau)",
        "spec": "assumption_a3_side_effects",
        "proofs": [],
        "code": [],
        "tests": ["tests/test_traces.py::test_each_rule_rejects_the_log_that_breaks_it",
                  "tests/test_statements.py::test_changed_side_effect_is_listed_for_compensation"],
    },
    {
        "statement": "Definition 1: the target is no longer accessible (no layer holds a forgotten part or its text)",
        "spec": "privacy_nothing_forgotten_remains",
        "proofs": [],
        "code": [],
        "tests": ["tests/test_oracle.py::test_privacy_statement_catches_a_log_that_keeps_a_hidden_part",
                  "tests/test_oracle.py::test_privacy_allows_text_the_twin_holds_under_another_source"],
    },
)
