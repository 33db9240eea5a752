# The Swin backbone (LiSASwinTransformer) of every Swin config: Table 1 (ImageNet-1K), Table 3
# (UperNet) and Table 4 (Mask R-CNN). `swin_backbone` is the LiSA row; a row that changes the
# attention merges `swin_attention[row]` into it. Every argument naming the attention is in this file.
# Where the kernel attention goes is FLatten's Swin design (FLatten-Transformer's flatten_swin_t:
# attention types LLSS, window 56 at 224 px): over the whole feature map in stages 1-2, Swin's
# shifted 7 x 7 windows ('window', shifted in odd blocks) kept in stages 3-4. LiSA takes the same places.
swin_attention = dict(
    lisa=dict(attn_cfgs=[dict(type='lisa', num_steps=3)] * 2 + [dict(type='window', window_size=7)] * 2),
    flatten=dict(attn_cfgs=[dict(type='flatten')] * 2 + [dict(type='window', window_size=7)] * 2),
    softmax=dict(attn_cfgs=[dict(type='window', window_size=7)] * 4),
)
swin_backbone = dict(type='LiSASwinTransformer', arch='tiny', pretrain_img_size=224, **swin_attention['lisa'])
