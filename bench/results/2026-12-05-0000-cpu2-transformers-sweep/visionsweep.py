"""transformers vision, audio and multimodal models through wick.compile on the CPU, inference: each default
config with 2 layers and 64x64 images; results against eager, graphs/breaks/fallbacks from wick.stats()."""
import sys, torch, transformers as T, wick
for name in sys.argv[1].split(","):
    try:
        torch.manual_seed(0)
        cls = getattr(T, name); cfg = cls.config_class()
        for k, v in dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=64,
                         d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                         encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=1000, max_source_positions=64,
                         max_target_positions=64, pad_token_id=1, bos_token_id=1, eos_token_id=1,
                         decoder_start_token_id=1).items():  # hierarchical models (depths) keep their defaults
            if hasattr(cfg, k) and v is not None and not hasattr(cfg, "depths"):
                try: setattr(cfg, k, v)
                except Exception: pass
        for sub in ("text_config", "vision_config"):
            c = getattr(cfg, sub, None)
            if c is not None:
                for k, v in dict(num_hidden_layers=2, image_size=64, patch_size=16, vocab_size=1000).items():
                    if hasattr(c, k): setattr(c, k, v)
        m = cls(cfg).eval()
        if "Whisper" in name:
            kw = dict(input_features=torch.randn(2, cfg.num_mel_bins, 2 * cfg.max_source_positions), decoder_input_ids=torch.randint(0, 1000, (2, 8)))
        elif "Wav2Vec2" in name or "Hubert" in name:
            kw = dict(input_values=torch.randn(2, 4000))
        elif "CLIP" in name or "Siglip" in name:
            kw = dict(input_ids=torch.randint(0, 1000, (2, 8)), pixel_values=torch.randn(2, 3, 64, 64))
        else:
            size = getattr(cfg, "image_size", 64)
            size = size if isinstance(size, int) else size[0]
            kw = dict(pixel_values=torch.randn(2, 3, size, size))
        if "ViTMAE" in name:  # its random masking, drawn from the given noise
            kw["noise"] = torch.rand(2, (64 // cfg.patch_size) ** 2)
        wick.reset(); f = wick.compile(m)
        with torch.no_grad():
            a = m(**kw); b = f(**kw); b = f(**kw)
        la, lb = a[0], b[0]
        err = (la - lb).abs().max().item() / max(1e-6, la.abs().max().item())
        st = wick.stats()
        print(f"{name}: rel err {err:.1e}, graphs {st['graphs']}, breaks {st['breaks']}, fallbacks {len(st['fallbacks'])}; {(st['break_reasons'] + [str(r) for r in st['fallbacks']])[:1]}", flush=True)
    except Exception as e:
        print(f"{name}: ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)
