"""Each paper statement → its spec function, its Z3 obligations (and the encoding checks beside
them, which are not proofs), the code ties that check the functions those obligations abstract
on every small input (`unsee.proofs.ties`), the functions of model/ whose code is checked against a contract
written from it (`unsee prove --code`, proofs/code.py), and the tests that run it: the
property tests, the refinement of the Z3 graph model and the engine's trace validation.

tests/specs/test_manifest.py fails if any name here stops existing, or if a spec function or an
obligation exists that no row mentions.
"""

MANIFEST = (
    {
        "statement": "Lemma 1 (Prefix sharing)",
        "spec": "lemma1_prefix_sharing",
        "proofs": ["theorem1_lemma1_induction", "lemma1_bounded"],
        "ties": ["F", "sanitize", "first_entry", "restore", "replay"],
        "code": ["unsee.model.plan.first_entry"],
        "tests": ["tests/model/test_reference_machine.py::TestReferenceMachine",
                  "tests/specs/test_statements.py::test_every_statement_holds_on_the_reference"],
    },
    {
        "statement": "Lemma 2 (i) taint monotonicity",
        "spec": "lemma2_taint_monotonicity",
        "proofs": ["lemma2_closure_step"],
        "ties": ["closure"],
        "code": [],
        "tests": ["tests/model/test_reference_machine.py::TestReferenceMachine",
                  "tests/specs/test_statements.py::test_every_statement_holds_on_the_reference"],
    },
    {
        "statement": "Lemma 2 (ii) certifiable boundary",
        "spec": "lemma2_certifiable_boundary",
        "proofs": ["lemma2_boundary_bounded", "lemma2_taint_queries"],
        "ties": ["closure", "conservative_graph"],
        "code": ["unsee.model.plan.taint_closure", "unsee.model.plan.suffix_closure"],
        "tests": ["tests/model/test_refinement.py::test_z3_closure_refines_the_reference_runtime",
                  "tests/model/test_refinement.py::test_z3_closure_refines_the_kv_runtime",
                  "tests/specs/test_statements.py::test_every_statement_holds_on_the_reference"],
    },
    {
        "statement": "Theorem 1 (Splicing equivalence)",
        "spec": "theorem1_splicing_equivalence",
        "proofs": ["theorem1_lemma1_induction", "theorem1_bounded"],
        "ties": ["F", "sanitize", "first_entry", "restore", "replay"],
        "code": ["unsee.model.replay.restore"],
        "tests": ["tests/engine/test_traces.py::test_every_forget_of_varied_sessions_follows_the_spec",
                  "tests/engine/test_traces.py::test_a_mutated_engine_is_rejected_by_the_rule_it_breaks",
                  "tests/model/test_reference_machine.py::TestReferenceMachine",
                  "tests/specs/test_mutants.py::test_mutant_is_caught_with_a_short_trace"],
    },
    {
        "statement": "Theorem 1 through the protocol: graph() and the receipt's τ and T equal the twin's",
        "spec": "protocol_reports_the_twin",
        "proofs": [],
        "code": [],
        "tests": ["tests/specs/test_mutants.py::test_protocol_mutant_is_caught_by_the_default_run",
                  "tests/specs/test_kit.py::test_kit_rejects_mutant_with_a_readable_trace"],
    },
    {
        "statement": "Corollary 1 (Recomputation lower bound and optimality)",
        "spec": "corollary1_optimal_invocations",
        "proofs": ["corollary1_cheaper_shapes_not_exact", "corollary1_cost", "corollary1_any_checkpoint_set"],
        "encoding_checks": ["corollary1_splice_is_exact"],
        "ties": ["F", "sanitize", "first_entry", "choose_checkpoint", "restore", "replay"],
        "code": ["unsee.model.plan.choose_checkpoint"],
        "tests": ["tests/engine/test_traces.py::test_full_reset_and_forced_checkpoint_follow_the_spec",
                  "tests/specs/test_statements.py::test_coarser_checkpoint_costs_T_minus_c",
                  "tests/specs/test_statements.py::test_full_reset_costs_T"],
    },
    {
        "statement": "Assumption A1 (deterministic decoding)",
        "spec": "assumption_a1_deterministic_decoding",
        "proofs": ["a1_needed"],
        "ties": ["F"],
        "code": [],
        "tests": ["tests/specs/test_statements.py::test_unseeded_sampling_is_reported_as_a1_violation"],
    },
    {
        "statement": "Assumption A2 (sanitized stream = counterfactual stream)",
        "spec": "assumption_a2_sanitized_stream",
        "proofs": ["a2_needed"],
        "ties": ["sanitize"],
        "code": ["unsee.model.replay.sanitize", "unsee.model.state.Observation.without"],
        "tests": ["tests/specs/test_statements.py::test_every_statement_holds_on_the_reference"],
    },
    {
        "statement": "Assumption A3 (no committed side effects after tau)",
        "spec": "assumption_a3_side_effects",
        "proofs": ["a3_compensation"],
        "ties": ["replay_tools", "compensation"],
        "code": ["unsee.model.plan.replay_tools", "unsee.model.plan.compensation"],
        "tests": ["tests/engine/test_traces.py::test_each_rule_rejects_the_log_that_breaks_it",
                  "tests/specs/test_statements.py::test_changed_side_effect_is_listed_for_compensation",
                  "tests/specs/test_erasure.py::test_compensation_lists_a_call_committed_at_tau"],
    },
    {
        "statement": "Definition 1: the target is no longer accessible (no layer holds a forgotten part or its text)",
        "spec": "privacy_nothing_forgotten_remains",
        "proofs": [],
        "code": [],
        "tests": ["tests/model/test_oracle.py::test_privacy_statement_catches_a_log_that_keeps_a_hidden_part",
                  "tests/model/test_oracle.py::test_privacy_allows_text_the_twin_holds_under_another_source"],
    },
    {
        "statement": "Definition 1 on what is persisted: no byte of a forgotten part in any file the runtime keeps, "
                     "and the log read back from them is o^-z (unsee.specs.erasure)",
        "spec": "erasure_nothing_forgotten_is_persisted",
        "proofs": [],
        "code": [],
        "tests": ["tests/store/test_erasure.py::test_the_stored_runtime_persists_no_byte_of_a_forgotten_part",
                  "tests/store/test_erasure.py::test_erasure_catches_a_store_that_keeps_the_prefix_verbatim",
                  "tests/specs/test_erasure.py::test_erasure_catches_a_forgotten_text_left_in_a_side_file"],
    },
    {
        "statement": "Forgetting across threads that share a store (model/shared.schedule): the store and every "
                     "thread equal a full reset of every thread, each thread replayed T_u - tau_u + 1 times "
                     "(Corollary 1 per thread; none where no read changed)",
        "spec": "cross_thread_forget_is_a_full_reset",
        "proofs": [],
        "code": [],
        "tests": ["tests/specs/test_shared.py::test_a_cross_thread_forget_is_a_full_reset_at_its_optimal_cost",
                  "tests/specs/test_shared.py::test_the_statement_catches_each_mistaken_schedule",
                  "tests/integrations/test_langgraph_store.py::test_heldout_memory_agents_forget_exactly_in_every_thread"],
    },
)
