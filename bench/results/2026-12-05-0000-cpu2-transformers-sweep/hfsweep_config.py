"""Each model's default config shrunk to 2 layers of width 64 (4 heads, vocabulary 1000, token ids above it set
to 1), shared by hfsweep.py and trainsweep.py."""
import transformers as T


def small_config(name):
    cfg_cls = getattr(T, name).config_class
    cfg = cfg_cls()
    small = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=1000,
                 num_key_value_heads=2, head_dim=16, n_embd=64, n_layer=2, n_head=4, d_model=64, encoder_layers=2,
                 decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                 decoder_ffn_dim=128, max_position_embeddings=128, embedding_size=64, d_ff=128, num_layers=2,
                 num_heads=4, d_kv=16, ffn_dim=128, num_decoder_layers=2,
                 num_local_experts=4, num_experts=4, moe_intermediate_size=64, shared_expert_intermediate_size=64,
                 attention_window=8, block_sizes=[1, 1], sliding_window=8)
    small.update(rotary_dim=16, num_encoder_layers=2, decoder_vocab_size=1000)
    for k, v in small.items():
        if hasattr(cfg, k):
            try:
                setattr(cfg, k, v)
            except (AttributeError, NotImplementedError):  # derived (Falcon's head_dim) or refused (XLNet, Funnel)
                pass
    for k in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        if isinstance(getattr(cfg, k, None), int) and getattr(cfg, k) >= 1000:
            setattr(cfg, k, 1)
    return cfg
