"""Ready-made factories for the kit: `--unsee-runtime=unsee.specs.runtimes:<name>`.

Each takes the drawn config {"policy", "sampling", "seed"} and returns a fresh runtime:
`reference` (the pure-Python model), and one per mutant, which the kit must reject. The
real engine on a tiny model is `unsee.impl.engine.kv_runtime:kv_tiny_llama`.
"""

from __future__ import annotations

from unsee.specs.reference import ReferenceRuntime
from unsee.model.state import Config
from unsee.specs import mutants as M


def _cfg(cfg: dict) -> Config:
    return Config(sampling=cfg.get("sampling", False), seed=cfg.get("seed", 0))


def reference(cfg: dict):
    return ReferenceRuntime(_cfg(cfg), cfg.get("policy", "every"))



def _mutant(cls):
    def factory(cfg: dict):
        return cls(_cfg(cfg), cfg.get("policy", "every"))
    factory.__name__ = cls.__name__
    factory.__doc__ = cls.__doc__
    return factory


crop_at_tau = _mutant(M.CropAtTau)
one_transition_short = _mutant(M.OneTransitionShort)
source_redaction = _mutant(M.SourceRedaction)
sanitize_without_replay = _mutant(M.SanitizeWithoutReplay)
span_excision = _mutant(M.SpanExcision)
reuse_post_tau_cache = _mutant(M.ReusePostTauCache)
stale_graph_index = _mutant(M.StaleGraphIndex)
ignores_method = _mutant(M.IgnoresMethod)
recent_checkpoints_only = _mutant(M.RecentCheckpointsOnly)
wrong_log_after_forgets = _mutant(M.WrongLogAfterForgets)
receipt_taint_one_hop = _mutant(M.ReceiptTaintOneHop)
compensation_args_swapped = _mutant(M.CompensationArgsSwapped)
compactions_uncheckpointed = _mutant(M.CompactionsUncheckpointed)
keeps_hidden_parts = _mutant(M.KeepsHiddenParts)
crops_late_after_a_compaction = _mutant(M.CropsLateAfterACompaction)  # wrong in one rare conjunction only
MUTANT_FACTORIES = ("crop_at_tau", "one_transition_short", "source_redaction", "sanitize_without_replay",
                    "span_excision", "reuse_post_tau_cache", "stale_graph_index", "ignores_method",
                    "recent_checkpoints_only", "wrong_log_after_forgets", "receipt_taint_one_hop",
                    "compensation_args_swapped", "compactions_uncheckpointed", "keeps_hidden_parts")
