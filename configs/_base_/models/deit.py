# The DeiT backbone (LiSAViT) of every DeiT config: Table 1, Table 5 and the mini-ImageNet ablations.
# `deit_backbone` is the LiSA row (T = 3 steps, adaptive step weights, 3x3 local branch, FLatten's
# focusing function and depthwise conv: LiSAAttention's defaults); a Table row that changes the
# attention merges `deit_attention[row]` into it. Every argument naming the attention is in this file.
deit_attention = dict(
    lisa=dict(attn_cfgs=dict(type='lisa', num_steps=3)),
    softmax=dict(attn_cfgs=dict(_delete_=True, type='softmax')),
    flatten=dict(attn_cfgs=dict(_delete_=True, type='flatten')),
    linear=dict(attn_cfgs=dict(_delete_=True, type='linear')),  # one hop, no focusing, no depthwise conv
    # Castling-ViT's published linear angular attention (own v_i / 2, per-token L2 norm, 9 x 1 depthwise conv over
    # the tokens, class token included) and, like that module, no positional encoding on k. The kernel alone is
    # form='kernel' (projects/lisa/models/attention/angular.py).
    angular=dict(attn_cfgs=dict(_delete_=True, type='angular', form='castling', pos_shape=None)),
)
deit_backbone = dict(
    type='LiSAViT', arch='deit-tiny', pretrain_img_size=224, patch_size=16, drop_path_rate=0.1, **deit_attention['lisa'])
