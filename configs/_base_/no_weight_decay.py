# Parameters that never decay, in every config of this project (classification and dense):
# norms (found by their type), position tables (the backbones' and the kernel attentions'), and
# the attentions' own scalars: FLatten's focusing scale, LiSA's mixing logits alpha and the
# biases of its step-weight MLP. Used as `optim_wrapper = dict(paramwise_cfg=_base_.no_decay)`;
# it merges into the mm recipe's own paramwise_cfg (mmpretrain also exempts every bias and 1-D
# parameter, the Swin detection / segmentation recipes exempt norms and position tables).
no_decay = dict(
    norm_decay_mult=0.0,
    custom_keys={
        key: dict(decay_mult=0.0)
        for key in (
            'pos_embed',  # PVT / DeiT position tables, Swin's absolute_pos_embed
            'cls_token',
            'relative_position_bias_table',  # Swin's window attention
            'attn.positional_encoding',  # the kernel attentions' table added to k (FLatten's)
            'attn.scale',  # FLatten's per-channel focusing scale
            'attn.alpha',  # LiSA's global / local mixing logits
            'attn.step_mlp.0.bias',  # LiSA's step-weight MLP (Eq. 10)
            'attn.step_mlp.2.bias',
        )
    })
