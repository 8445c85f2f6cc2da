import transformers


def make_lm() -> transformers.GPT2LMHeadModel:
    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(
        vocab_size=40, n_positions=32, n_embd=32, n_layer=2, n_head=4, pad_token_id=0
    )
    return transformers.GPT2LMHeadModel(config)
