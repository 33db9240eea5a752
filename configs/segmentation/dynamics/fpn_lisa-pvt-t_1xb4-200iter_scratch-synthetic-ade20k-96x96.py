# The training-dynamics study (tools/training_dynamics.py, docs/training_dynamics.md): the demo's Semantic FPN
# (../demo/) trained from scratch for 200 iterations of 4 images, the losses logged every 10 iterations.
# The study sets the attention (`model.backbone.attn_cfgs`), the learning rate and the data root per run.
custom_imports = dict(imports=['projects.lisa.registry'], allow_failed_imports=False)
_base_ = '../demo/fpn_lisa-pvt-t_1xb4-150iter_synthetic-ade20k-96x96.py'

max_iters = 200
model = dict(backbone=dict(init_cfg=None))
param_scheduler = [dict(type='PolyLR', eta_min=0.0, power=0.9, begin=0, end=max_iters, by_epoch=False)]
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
default_hooks = dict(logger=dict(interval=10), checkpoint=dict(interval=max_iters))
