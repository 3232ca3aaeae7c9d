"""The model organisms: small Llamas trained here to recall what a session told them, so that
an audit can see a forget take a fact away. `data` (synthetic transcripts rendered as the
runtime renders them), `train`, `evaluate` (the measurements and the model card), and
`weights/<name>/` (one folder per organism, loaded by `unsee.impl.engine.models.load(name)`).
"""
