import transformers


def make_classifier() -> transformers.BertForSequenceClassification:
    transformers.logging.set_verbosity_error()
    config = transformers.BertConfig(
        vocab_size=60,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=2,
        pad_token_id=0,
    )
    return transformers.BertForSequenceClassification(config)
