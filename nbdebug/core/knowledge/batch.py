"""Looking at the batch: the silent data bugs of text, image and table batches (``nbdebug.inspect_batch``).

These bugs raise no error: the loss goes down and the model is bad.  Each entry is one kind of finding of
``inspect_batch`` / ``compare_splits``; ``THRESHOLDS`` are the numbers the checks use, each with why.
``CHAT_MARKERS`` are the texts that open an assistant's turn in the common chat templates (where the loss should
start); ``TEXT_COLUMNS`` the Trainer keeps whatever the model's ``forward`` takes.
"""

from __future__ import annotations

from nbdebug.core._findings import Fix, Severity
from nbdebug.core.knowledge._schema import Entry, Threshold

__all__ = ["ENTRIES", "THRESHOLDS", "CHAT_MARKERS", "TRAINER_KEEPS"]

_HF_CLM = "https://huggingface.co/docs/transformers/tasks/language_modeling"
_HF_TRAINER = "https://huggingface.co/docs/transformers/main_classes/trainer"
_TRL_SFT = "https://huggingface.co/docs/trl/sft_trainer"
_KARPATHY = "https://karpathy.github.io/2019/04/25/recipe/"

W, E, INFO = Severity.WARNING, Severity.ERROR, Severity.INFO

ENTRIES: tuple[Entry, ...] = (
    # -- text --------------------------------------------------------------------------------------------------
    Entry("labels_shifted_twice", "Labels are shifted by one, and the model shifts them again", E, (
        Fix("Give labels aligned with input_ids: Hugging Face causal LMs shift inside the loss",
            "batch['labels'] = batch['input_ids'].clone()\nbatch['labels'][batch['attention_mask'] == 0] = -100"),
    ), (_HF_CLM,), contexts=()),
    Entry("labels_not_shifted", "Labels equal input_ids, but this model does not shift them: it learns to copy", W, (
        Fix("Shift before the loss: position t predicts token t+1",
            "loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), ignore_index=-100)"),
    ), (_HF_CLM,), contexts=()),
    Entry("row_fully_masked", "Rows with every label -100 add nothing to the loss", W, (
        Fix("Drop rows whose response was cut off, or raise max_length so the answer fits",
            "keep = (batch['labels'] != -100).any(dim=1)\nbatch = {k: v[keep] for k, v in batch.items()}"),
    ), (_TRL_SFT,), contexts=()),
    Entry("missing_eos", "No row ends with the EOS token: the model never learns to stop", W, (
        Fix("Append the EOS token when tokenizing", "tok(text + tok.eos_token, ...)  # or add_eos_token=True where supported"),
    ), ("https://github.com/huggingface/transformers/issues/22794",), contexts=()),
    Entry("missing_bos", "Rows do not start with the BOS token the tokenizer defines", INFO, (
        Fix("Tokenize with add_special_tokens=True (the default) so BOS comes first", "tok(texts, add_special_tokens=True)"),
    ), (_HF_CLM,), contexts=()),
    Entry("double_bos", "Rows start with two BOS tokens", W, (
        Fix("The chat template already adds BOS: tokenize its output without special tokens",
            "text = tok.apply_chat_template(msgs, tokenize=False)\nids = tok(text, add_special_tokens=False)"),
    ), ("https://github.com/huggingface/transformers/issues/25886",), contexts=()),
    Entry("rows_truncated", "Rows are cut at max_length (no EOS at their end)", W, (
        Fix("Raise max_length, or split long texts into chunks instead of cutting them",
            "tok(texts, truncation=True, max_length=4096, return_overflowing_tokens=True, stride=128)"),
    ), (_HF_CLM,), contexts=()),
    Entry("heavy_padding", "Most of the batch is padding", INFO, (
        Fix("Group rows of similar length, or pack them", "TrainingArguments(group_by_length=True)"),
    ), (_HF_TRAINER,), contexts=()),
    Entry("attention_mask_mismatch", "attention_mask disagrees with the pad token", E, (
        Fix("Build the mask from the tokenizer (it pads and masks together), not by hand",
            "batch = tok(texts, padding=True, return_tensors='pt')  # input_ids and attention_mask agree"),
    ), ("https://huggingface.co/docs/transformers/pad_truncation",), contexts=()),
    Entry("token_id_beyond_vocab", "Token ids at or above the model's embedding size", E, (
        Fix("Tokenizer and model disagree: resize the embedding after adding tokens",
            "model.resize_token_embeddings(len(tokenizer))"),
        Fix("Or load the tokenizer that belongs to the model", "tok = AutoTokenizer.from_pretrained(model_name)"),
    ), ("https://github.com/huggingface/transformers/issues/4875",), contexts=()),
    Entry("loss_on_prompt", "The loss is computed on the prompt, not only on the answer", W, (
        Fix("Mask everything before the assistant's turn with -100",
            "start = position_after_assistant_marker(ids)\nlabels[:start] = -100"),
        Fix("With TRL: train on completions only", "SFTConfig(completion_only_loss=True)  # or assistant_only_loss=True"),
    ), (_TRL_SFT,), contexts=()),
    Entry("eos_masked_as_pad", "pad == eos, and the EOS is masked out of the loss with the padding", W, (
        Fix("Use a pad token distinct from EOS", "tok.add_special_tokens({'pad_token': '<pad>'})\n"
            "model.resize_token_embeddings(len(tok))"),
        Fix("Or mask by attention_mask only, keeping the first EOS trained",
            "labels[batch['attention_mask'] == 0] = -100  # with the real EOS inside the mask"),
    ), ("https://github.com/huggingface/transformers/issues/22794",), contexts=()),
    Entry("labels_padded_with_pad_id", "Labels are padded with the pad id instead of -100: the loss trains on padding", E, (
        Fix("Pad labels with -100", "DataCollatorForSeq2Seq(tok, label_pad_token_id=-100)\n"
            "# or: labels[labels == tok.pad_token_id] = -100"),
    ), ("https://huggingface.co/docs/transformers/main_classes/data_collator",), contexts=()),
    Entry("duplicate_rows", "The same row appears more than once", W, (
        Fix("Deduplicate the dataset (exact and near duplicates) before splitting",
            "df = df.drop_duplicates()  # or ds = ds.filter(first_seen_hash)"),
    ), ("https://arxiv.org/abs/2107.06499",), contexts=()),
    Entry("empty_rows", "Rows hold no tokens but special tokens and padding", W, (
        Fix("Filter empty examples before tokenizing", "ds = ds.filter(lambda ex: len(ex['text'].strip()) > 0)"),
    ), (_HF_CLM,), contexts=()),
    # -- Hugging Face Trainer ----------------------------------------------------------------------------------
    Entry("columns_dropped", "The Trainer drops columns the model's forward does not take", W, (
        Fix("Tokenize the text column (map) so input_ids reach the model",
            "ds = ds.map(lambda ex: tok(ex['text'], truncation=True), batched=True, remove_columns=['text'])"),
        Fix("Or keep the columns for a custom collator", "TrainingArguments(remove_unused_columns=False)"),
    ), (_HF_TRAINER,), contexts=()),
    # -- images -----------------------------------------------------------------------------------------------
    Entry("raw_pixels", "Images reach the model as raw 0-255 pixels", W, (
        Fix("Scale to [0, 1] and normalize", "transforms.Compose([transforms.ToTensor(), "
            "transforms.Normalize(mean, std)])  # ToTensor divides by 255"),
    ), (_KARPATHY,), contexts=()),
    Entry("pixels_scaled_twice", "Pixels are divided by 255 twice (all values near 0)", W, (
        Fix("Divide once: ToTensor already scales uint8 images to [0, 1]", "x = transforms.ToTensor()(img)  # no / 255"),
    ), (_KARPATHY,), contexts=()),
    Entry("channel_order", "Channels look like BGR while the normalization is in RGB order", W, (
        Fix("Convert OpenCV's BGR to RGB when reading", "img = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)"),
    ), ("https://docs.opencv.org/4.x/d4/da8/group__imgcodecs.html",), contexts=()),
    Entry("identical_images", "The same image appears more than once in the batch", W, (
        Fix("Check the sampler and augmentation: the same index drawn again, or a transform that ignores its input",
            "len(set(sampler_indices)) == len(sampler_indices)"),
    ), (_KARPATHY,), contexts=()),
    Entry("blank_images", "Images with a single value everywhere (black, white or empty)", W, (
        Fix("Look at the files behind them: failed reads, all-zero masks or an exhausted crop",
            "bad = [i for i, x in enumerate(batch) if x.std() == 0]"),
    ), (_KARPATHY,), contexts=()),
    # -- labels (images, tables) ------------------------------------------------------------------------------
    Entry("conflicting_labels", "The same input appears with two different labels", E, (
        Fix("Find the rows and fix their labels (or drop the ambiguous ones)",
            "df[df.duplicated(features, keep=False)].sort_values(features)"),
    ), (_KARPATHY,), contexts=()),
    Entry("single_class_batch", "Every example of the batch has the same label", W, (
        Fix("Shuffle: a dataset sorted by class gives one-class batches", "DataLoader(ds, batch_size=64, shuffle=True)"),
    ), (_KARPATHY,), contexts=()),
    Entry("class_imbalance", "Classes are strongly imbalanced", INFO, (
        Fix("Weight the loss or resample", "nn.CrossEntropyLoss(weight=1.0 / torch.bincount(y).float())"),
    ), (_KARPATHY,), contexts=()),
    # -- tables -----------------------------------------------------------------------------------------------
    Entry("unscaled_features", "Feature scales differ by orders of magnitude", W, (
        Fix("Standardize the features (fit on the training split only)",
            "from sklearn.preprocessing import StandardScaler\nX_train = StandardScaler().fit_transform(X_train)"),
    ), ("https://scikit-learn.org/stable/modules/preprocessing.html",), contexts=()),
    Entry("constant_columns", "Columns with one value: they carry no information", W, (
        Fix("Drop them (they are often a join or an export that failed)", "df = df.loc[:, df.nunique() > 1]"),
    ), ("https://scikit-learn.org/stable/modules/feature_selection.html",), contexts=()),
    Entry("nan_values", "NaN or Inf values in the inputs", E, (
        Fix("Impute or drop them before training (one NaN makes the loss NaN)",
            "from sklearn.impute import SimpleImputer\nX = SimpleImputer().fit_transform(X)"),
    ), ("https://scikit-learn.org/stable/modules/impute.html",), contexts=()),
    Entry("feature_is_label", "A feature gives the label away (target leakage)", E, (
        Fix("Drop the feature, or compute it only from what is known before the label",
            "X = X.drop(columns=[leaking_feature])"),
    ), ("https://scikit-learn.org/stable/common_pitfalls.html#data-leakage",), contexts=()),
    # -- across splits ----------------------------------------------------------------------------------------
    Entry("split_overlap", "Validation rows also appear in the training split", E, (
        Fix("Deduplicate before splitting, or drop from validation what training holds",
            "val = val[~val_hashes.isin(train_hashes)]"),
    ), ("https://arxiv.org/abs/2107.06499",), contexts=()),
    Entry("split_near_duplicates", "Validation rows nearly equal to training rows", W, (
        Fix("Deduplicate on a normalized form (case, whitespace, rounding) before splitting",
            "key = text.lower().split()  # or df.round(4) for numbers"),
    ), ("https://arxiv.org/abs/2107.06499",), contexts=()),
)

THRESHOLDS: tuple[Threshold, ...] = (
    Threshold("batch_shift_match", 0.9, "a label stream that equals input_ids moved by one position on 90% of its "
              "trained tokens is shifted, not a coincidence (natural text repeats a token in a row far less)",
              _HF_CLM),
    Threshold("batch_heavy_padding", 0.5, "half of the compute on padding is worth grouping by length", _HF_TRAINER),
    Threshold("batch_scale_ratio", 1000.0, "feature standard deviations 1000x apart slow gradient descent and "
              "dominate distance-based models", "https://scikit-learn.org/stable/modules/preprocessing.html"),
    Threshold("batch_raw_pixel_max", 20.0, "images in [0, 1] normalized with a per-channel std of 0.05 or more "
              "stay below 20 (ImageNet's normalization reaches 2.64); 0-255 pixels go far above", _KARPATHY),
    Threshold("batch_twice_scaled_max", 0.02, "all pixels below 0.02 (5/255): divided by 255 twice", _KARPATHY),
    Threshold("batch_imbalance_ratio", 10.0, "largest class 10x the smallest: accuracy says little",
              "https://imbalanced-learn.org/stable/introduction.html"),
    Threshold("batch_leak_min_rows", 20, "fewer rows than this can fit a label by chance", _KARPATHY),
    Threshold("batch_constant_rows", 200, "below this many rows a column (a rare one-hot category) is constant "
              "by chance: a remark, not a warning", "https://scikit-learn.org/stable/modules/feature_selection.html"),
    Threshold("batch_separation_min_rows", 100, "a single threshold separating every class on fewer rows happens "
              "by chance; on 100 or more it is leakage or a trivial task", _KARPATHY),
    Threshold("batch_duplicate_share", 0.02, "exact repeats with the same label up to 2% of the rows are common in "
              "tables of rounded measurements (iris: 1 of 150) and change little: a remark; more is a warning",
              "https://arxiv.org/abs/2107.06499"),
    Threshold("batch_bgr_min_gap", 0.04, "red and blue channel means must differ this much (on a 0-1 scale), in "
              "opposite directions in the batch and in the given mean, before a channel swap is claimed",
              "https://docs.opencv.org/4.x/d4/da8/group__imgcodecs.html"),
)

#: texts that open an assistant's turn in common chat templates; the loss should start after them
CHAT_MARKERS: tuple[str, ...] = (
    "<|im_start|>assistant", "<|start_header_id|>assistant<|end_header_id|>", "<|assistant|>",
    "<start_of_turn>model", "[/INST]", "### Response:", "### Assistant:", "<|Assistant|>", "Assistant:",
)

#: columns the Hugging Face Trainer keeps whatever the model's forward takes (it renames them to labels)
TRAINER_KEEPS: tuple[str, ...] = ("label", "label_ids", "labels")
