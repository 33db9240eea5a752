"""What a model costs: FLOPs in the paper's convention (:mod:`.flops`), and time and memory measured
side by side (:mod:`.timing`) for one attention layer (:mod:`.attention`), DeiT-T and the dense models
(:mod:`.model`, with the torch-only DeiT of :mod:`.deit`) and the exported models (:mod:`.deploy`).

Submodules are imported on use: :mod:`.timing`, :mod:`.deit` and :mod:`.attention` need torch alone,
:mod:`.flops` MMEngine, :mod:`.deploy` onnxruntime.
"""
