"""Shared estimator base: parameters, loading, the read-out, inference, tags, pickling."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import warnings
from numbers import Integral, Real

import numpy as np
import torch
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import HasMethods, StrOptions
from sklearn.utils.validation import check_is_fitted, check_random_state

from .._core.deprecations import (
    fine_tune_constraint,
    head_learning_rate_constraint,
    warn_renamed,
)
from .._core.devices import check_device_name, resolve_device, resolve_precision
from .._core.flops import training_flops
from .._core.launch import current_share
from .._core.messages import report, user_stacklevel
from .._inference.int8 import int8_unavailable
from .._inference.predict import low_precision_copy, predict_rows
from .._nn.backbone import SpecialTokens, model_max_length, quiet_loading
from .._nn.network import SentenceEncoder, exported_backbone_state, weights_version
from .._storage.files import check_output_dir
from .._storage.fingerprint import weights_fingerprint
from .._text.encoding import encode_texts, pad_batch
from .._training.distributed import shared_seed
from .._training.rank_failures import leave_after
from ..pooling import CHUNK_POOLINGS, TOKEN_POOLINGS
from ..truncation import STRATEGIES
from .constraints import RANDOM_STATE, Number
from .feature_memory import record_weights_key
from .model_source import fitted_encoder_source, load_encoder
from .persistence import folder as _persistence
from .persistence.registry import register_estimator
from .pickling import pickled_state, unpickled_state
from .prediction_cache import forget_fit, kept_cache, prediction_cache, remembered, restore_cache
from .readout import (
    check_readout_parameters,
    refuse_untrained,
    resolve_readout,
    warn_untrained_pooler,
)

__all__ = ["BertEstimatorBase"]

#: ``fine_tune`` values: train nothing, only the layers on top of the encoder, or everything
FINE_TUNE_MODES = ("none", "top", "full")

#: ``precision`` values ("int8" for inference only: training runs fp32)
PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")


def _json_keys(value):
    """``value`` with every dict key one that JSON takes: numpy scalars (``class_weight``'s
    labels from ``np.unique(y)``) as their Python values, other objects as their ``str``."""
    if isinstance(value, dict):
        return {_json_key(k): _json_keys(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_keys(v) for v in value]
    return value


def _json_key(key):
    if isinstance(key, np.generic):
        key = key.item()
    return key if key is None or isinstance(key, (str, int, float, bool)) else str(key)


class BertEstimatorBase(BaseEstimator):
    """Base of skbert's estimators: everything but the learning task.

    Subclasses define ``__init__`` (storing their parameters verbatim), ``fit`` and their
    prediction methods. ``fit`` resolves its training parameters once into a
    :class:`~skbert._estimator.training_settings.TrainingSettings` (handed to what reads them),
    starts with :meth:`_start_fit`, builds the network with
    :meth:`_build_encoder` (which resolves the read-out parameters into ``readout_``), and
    predictions go through :meth:`_forward_all`, the one inference path.

    Every public subclass joins the registry of estimator classes when it is defined
    (:mod:`skbert._estimator.persistence.registry`): its saves load with :func:`skbert.load`.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        register_estimator(cls)

    _parameter_constraints: dict = {
        "model": [str, os.PathLike, HasMethods(["save_pretrained", "get_params"])],
        "pooling": [StrOptions(set(TOKEN_POOLINGS))],
        "layer": [Integral, tuple, list],  # ranges are checked against the model in fit
        "layer_combine": [StrOptions({"concat", "mean", "max"})],
        "truncation": [StrOptions(set(STRATEGIES))],
        "max_length": [Number(Integral, 3, None, closed="left"), None],
        "head_length": [Number(Integral, 0, None, closed="left")],
        "chunk_pooling": [StrOptions(set(CHUNK_POOLINGS))],
        "max_chunks": [Number(Integral, 1, None, closed="left"), None],
        # subclasses narrow it to the modes they offer; "head" is the old spelling of "top"
        "fine_tune": [fine_tune_constraint(FINE_TUNE_MODES)],
        "batch_size": [Number(Integral, 1, None, closed="left")],
        "device": [str],
        "precision": [StrOptions(set(PRECISIONS))],
        "verbose": ["verbose"],
    }

    #: constraints of the training parameters, for the estimators that train
    _training_constraints: dict = {
        "cnn_kernel_sizes": [tuple, list],
        "cnn_channels": [Number(Integral, 1, None, closed="left")],
        # AdamW rates above 1 only diverge (1e6 trained to NaN, 1e38 overflowed)
        "learning_rate": [Number(Real, 0, 1, closed="right")],
        "layer_lr_decay": [Number(Real, 0, 1, closed="right")],
        "top_learning_rate": [Number(Real, 0, 1, closed="right"), None],
        "head_learning_rate": head_learning_rate_constraint(
            [Number(Real, 0, 1, closed="right"), None]
        ),
        "weight_decay": [Number(Real, 0, None, closed="left")],
        "warmup_fraction": [Number(Real, 0, 1, closed="both")],
        "max_epochs": [Number(Integral, 1, None, closed="left")],
        "random_state": RANDOM_STATE,
        "warm_start": ["boolean"],
        "checkpoint_dir": [None, str, os.PathLike],
        "checkpoint_steps": [Number(Integral, 1, None, closed="left")],
    }

    #: read-out fields and the parameters that set them: warm_start cannot change them
    _STRUCTURE = {
        "truncation": "truncation",
        "max_length": "max_length",
        "head_length": "head_length",
        "max_chunks": "max_chunks",
        "chunk_pooling": "chunk_pooling",
        "layers": "layer",
        "layer_combine": "layer_combine",
        "pooling": "pooling",
        "cnn_kernel_sizes": "cnn_kernel_sizes",
        "cnn_channels": "cnn_channels",
    }

    #: private fitted attributes (the public ones end in ``_``), reset with those by a fit
    _PRIVATE_FITTED = ("_n_features_out", "_fitted_model")
    #: what every save of a fitted estimator holds (:func:`skbert.load` checks)
    _SAVED_FITTED = ("network_", "tokenizer_", "special_tokens_", "readout_", "max_length_")

    # ------------------------------------------------------------------ fitting helpers
    def _start_fit(self, keep_learned: bool, trains: bool = True) -> None:
        """Reset what a previous ``fit`` left: the prediction caches, and unless
        ``keep_learned`` (``warm_start``) every fitted attribute; warn for old spellings. A
        warm start trains, so the feature cache's key of the weights it began from goes.
        A fit that ``trains`` refuses a device this machine lacks before the model loads."""
        check_device_name(self.device)  # a fit that loads nothing on it (memory=) too
        if trains:
            resolve_device(self.device)
        if self.checkpoint_dir is not None:  # a file or '' before the model loads
            check_output_dir(self.checkpoint_dir, "checkpoint_dir")
        check_readout_parameters(self.get_params(deep=False), trains)
        forget_fit(self)
        if keep_learned:
            self._forget("feature_fingerprint_")
        else:
            self._forget(*[k for k in vars(self) if k.endswith("_") and not k.startswith("_")])
            self._forget(*self._PRIVATE_FITTED)
        warn_renamed(self.get_params(deep=False), stacklevel=user_stacklevel())  # user's fit

    @contextlib.contextmanager
    def _atomic_fit(self):
        """Make a ``fit`` all or nothing: if it raises (a bad value, a diverged loss, Ctrl-C),
        the estimator's state is put back exactly as it was before (fitted or not); in a
        torchrun launch, this process leaves the process group unless every rank raises
        the error alike (:func:`~skbert._training.rank_failures.leave_after`).

        Fits never train the previous network in place (a ``warm_start`` fit trains a copy),
        so the attributes kept here are untouched by the failed fit.
        """
        before, cache = dict(vars(self)), kept_cache(self)
        try:
            yield
        except BaseException as error:
            vars(self).clear()
            vars(self).update(before)
            restore_cache(self, cache)  # the weights an unpickled memory= fit keeps there
            leave_after(error)  # in a launch: the other ranks may wait for this one
            raise

    def _warm_start_network(self):
        """A copy of the fitted network for a ``warm_start`` fit to train (the fitted one stays
        as it is until the fit succeeds), after checking that no parameter that shapes the
        network changed since the last fit."""
        network = self.fitted_network()
        model = self._model_identity()
        if model != self._fitted_model:
            raise ValueError(
                f"warm_start=True but model changed from {self._fitted_model!r} to {model!r} "
                "since the last fit; fit with warm_start=False to start from the new model."
            )
        config = network.backbone.config
        limit = model_max_length(self.tokenizer_, config)
        readout = resolve_readout(self.get_params(deep=False), config, self.special_tokens_, limit)
        for field, param in self._STRUCTURE.items():
            before, now = getattr(self.readout_, field), getattr(readout, field)
            if before != now:
                raise ValueError(
                    f"warm_start=True but {param} changed since the last fit (it resolves to "
                    f"{now!r}, the fitted network was built for {before!r}); warm_start "
                    "continues training the same network. Set it back, or fit with "
                    "warm_start=False to start anew."
                )
        return copy.deepcopy(network)

    def _model_identity(self):
        """``model`` as recorded by ``fit``: the name or folder, or the fitted estimator it
        was taken from: its kind, its own ``model`` and a digest of its encoder's weights (so
        that another fitted estimator is another model, and a pickled copy the same one)."""
        if isinstance(self.model, (str, os.PathLike)):
            return os.fspath(self.model)
        fitted = fitted_encoder_source(self.model)
        weights = weights_fingerprint(fitted.fitted_network().backbone)
        return f"a fitted {type(fitted).__name__} of {fitted._fitted_model} (encoder {weights})"

    #: parameters that do not change what a fit learns (or that the training loop's own
    #: identity covers: the seed drawn from random_state, the device type, so that the ranks
    #: of a launch given device="cuda:LOCAL_RANK" share one checkpoint), left out of a
    #: checkpoint's data key
    _NOT_IN_DATA_KEY = (
        "verbose",
        "checkpoint_dir",
        "checkpoint_steps",
        "memory",
        "random_state",
        "device",
    )

    def _checkpoint(self, first, second, targets, **task):
        """The :class:`~skbert._training.checkpoint.TrainingCheckpoint` of ``checkpoint_dir``
        for this training data and task, or None without ``checkpoint_dir``."""
        if self.checkpoint_dir is None:
            return None
        from .._training.checkpoint import TrainingCheckpoint

        params = self.get_params(deep=False)
        params = {k: v for k, v in params.items() if k not in self._NOT_IN_DATA_KEY}
        if isinstance(self.model, (str, os.PathLike)) and os.path.isdir(self.model):
            params["model"] = os.path.realpath(self.model)  # "m", "./m/": one folder
        data_key = self._data_key(first, second, targets, params=params, **task)
        return TrainingCheckpoint(self.checkpoint_dir, self.checkpoint_steps, data_key)

    def _fit_seed(self, checkpoint) -> int:
        """The seed of this fit: the one an int ``random_state`` makes (a checkpoint of
        another seed is then refused, naming the folder); for None or a ``RandomState``, the
        seed of the checkpointed run that this fit resumes, if any, so that they resume too."""
        seeded = isinstance(self.random_state, Integral)
        stored = None if checkpoint is None or seeded else checkpoint.stored_seed()
        if stored is None:
            stored = check_random_state(self.random_state).randint(2**31 - 1)
        return shared_seed(int(stored))  # a torchrun launch's ranks take rank 0's

    def _data_key(self, first, second, targets, **task) -> str:
        """A hash of the training data and task, for the checkpoint's identity."""
        from .._storage.feature_cache import text_digests

        digest = hashlib.blake2b(digest_size=20)
        digest.update(text_digests(first, second).tobytes())
        digest.update(np.ascontiguousarray(np.asarray(targets, dtype=np.float64)).tobytes())
        task = {"estimator": type(self).__name__, **task}
        digest.update(json.dumps(_json_keys(task), sort_keys=True, default=str).encode())
        return digest.hexdigest()

    def _launch_data_key(self, first, second, targets, **task):
        """What the ranks of a torchrun launch compare before a fit trains (``train``'s
        ``data_key``): :meth:`_data_key` of the texts, targets and task; None outside one."""
        if not current_share().distributed:
            return None
        return self._data_key(first, second, targets, **task)

    def _forget(self, *names) -> None:
        """Drop the learned attributes ``names`` that are set (those that no longer apply)."""
        for name in names:
            self.__dict__.pop(name, None)

    def _build_encoder(self, trains: bool = True) -> SentenceEncoder:
        """Load the encoder and tokenizer, resolve the read-out (for a fit that ``trains``, or
        not: see :meth:`_resolve_readout`); return the network."""
        tokenizer, backbone = load_encoder(self.model)
        warn_untrained_pooler(self.model, backbone, self.pooling)
        self._resolve_readout(tokenizer, backbone.config, trains)
        return SentenceEncoder(backbone, self.readout_).eval()

    def _resolve_readout(self, tokenizer, config, trains: bool = True) -> None:
        """Check the read-out parameters against the model and set the learned state that
        every estimator has: ``tokenizer_``, ``special_tokens_``, ``readout_``,
        ``max_length_`` and ``layers_``. A fit that ``trains`` nothing (its
        :attr:`~skbert._estimator.training_settings.TrainingSettings.trains`) refuses a
        read-out with weights of its own."""
        specials = SpecialTokens.from_tokenizer(tokenizer)
        limit = model_max_length(tokenizer, config)
        readout = resolve_readout(self.get_params(deep=False), config, specials, limit)
        if not trains:
            refuse_untrained(readout.untrained_weights, self.fine_tune)
        self.tokenizer_ = tokenizer
        self._fitted_model = self._model_identity()
        self.special_tokens_ = specials
        self.readout_ = readout
        self.max_length_ = readout.max_length
        self.layers_ = readout.layers

    # ------------------------------------------------------------------ inference
    def _encode(self, first, second=None):
        """Model rows of texts (or pairs), cut as the read-out says; reports truncation."""
        encoded = encode_texts(
            self.tokenizer_, self.special_tokens_, first, second, readout=self.readout_
        )
        if self.verbose and encoded.n_truncated:
            how = (
                "split into chunks"
                if self.readout_.chunked
                else f"truncated (truncation={self.truncation!r})"
            )
            if self.readout_.chunked and encoded.n_cut:
                how += (
                    f"; {encoded.n_cut} of them need more than max_chunks={self.max_chunks} "
                    "windows and lost the tokens past those"
                )
            what = "texts" if second is None else "pairs"
            report(
                f"{type(self).__name__}: {encoded.n_truncated} of the {len(encoded)} {what} "
                f"encoded exceed max_length={self.max_length_} tokens and were {how}."
            )
        return encoded

    def _batch_tensors(self, encoded, indices, device) -> dict:
        """Padded tensors of the texts ``indices`` of ``encoded``, as network keywords (for
        training batches, whose texts have different lengths)."""
        ids, mask, types, owner = pad_batch(encoded, indices, self.tokenizer_.pad_token_id or 0)
        return {
            "input_ids": torch.from_numpy(ids).to(device),
            "attention_mask": torch.from_numpy(mask).to(device),
            "token_type_ids": torch.from_numpy(types).to(device),
            "owner": torch.from_numpy(owner).to(device) if self.readout_.chunked else None,
            "n_texts": len(indices),
        }

    def _device_and_dtype(self, inference: bool = False, trained=None):
        """The device to run on and the precision's autocast dtype there (None: float32).

        ``fit`` raises for a CUDA or MPS ``device`` that this machine lacks. Predictions
        (``inference=True``) of a fitted model run on the CPU instead, with the CPU's
        precision for ``precision="auto"``, and warn once per estimator (and device; noted in
        its prediction cache): a model fitted on a GPU predicts anywhere without editing its
        parameters. ``trained``: the network about to be trained (``precision="auto"``
        depends on its size on CUDA).
        """
        try:
            device = resolve_device(self.device)
        except RuntimeError:  # a CUDA or MPS device that is not here
            if not inference:
                raise
            device = torch.device("cpu")
            cache = prediction_cache(self)
            if cache.warned_device != self.device:
                warnings.warn(
                    f"device={self.device!r} is not available here; predicting on the CPU. "
                    "set_params(device='cpu') silences this.",
                    UserWarning,
                    stacklevel=user_stacklevel(),  # the caller of transform, predict, ...
                )
                cache.warned_device = self.device
        flops = None if trained is None else training_flops(trained)
        return device, resolve_precision(self.precision, device, training_flops=flops)

    def fitted_network(self):
        """The fitted network: ``network_``, or the encoder whose loading ``fit`` deferred.

        A ``BertSentenceTransformer(memory=...)`` fit may leave the encoder unloaded
        (``deferred_network_``); it is loaded here on first need (checking that the model
        folder is unchanged since ``fit``) and kept with the estimator's prediction caches
        until the next ``fit``: the estimator's attributes stay as ``fit`` left them.

        Returns
        -------
        torch.nn.Module
            The encoder with its pooling (and, for a classifier, its output layer).

        Raises
        ------
        NotFittedError
            If the estimator is not fitted.
        RuntimeError
            If the model folder of a deferred encoder changed after ``fit``.
        """
        check_is_fitted(self)
        fitted = vars(self)
        if "network_" not in fitted and "deferred_network_" in fitted:
            deferred = fitted["deferred_network_"]

            def load():  # the folder's weights, under the key fit gave them
                network = deferred.load()
                record_weights_key(self, network, deferred.fingerprint)
                return network

            return remembered(self, "network", deferred, load)
        return self.network_

    def _inference_network(self, device, dtype):
        """The network for predictions: the fitted network in eval mode on ``device``, or for
        bf16/fp16 a low-precision copy, kept in the prediction cache until the next ``fit``."""
        network = self.fitted_network()
        if dtype is None:
            return low_precision_copy(network, device, None)

        def make():
            return low_precision_copy(network, device, dtype)

        key = (str(device), dtype, weights_version(network))  # weights loaded in place too
        return remembered(self, "low_precision", network, make, key=key)

    def _int8_runs(self, device, network=None) -> bool:
        """Whether ``precision="int8"`` runs int8 products on ``device`` (for ``network``, the
        float32 network in eval mode, when given); where it was asked for and cannot
        (:func:`~skbert._inference.int8.int8_unavailable`), warn once per fit (noted in the
        prediction cache) that prediction runs float32."""
        if self.precision != "int8":
            return False
        reason = int8_unavailable(device, network)
        if reason is None:
            return True
        cache = prediction_cache(self)
        if not cache.warned_int8:
            warnings.warn(
                f"precision='int8' predicts in float32 here: {reason}. "
                "set_params(precision='fp32') silences this.",
                UserWarning,
                stacklevel=user_stacklevel(),
            )
            cache.warned_int8 = True
        return False

    def _forward_all(self, first, second=None, *, desc="Encoding", all_layers=False):
        """Network output for every text (or pair), float32, in input order (see
        :func:`~skbert._inference.predict.predict_rows`)."""
        device, dtype = self._device_and_dtype(inference=True)
        network = self._inference_network(device, dtype)
        return predict_rows(
            network,
            self._encode(first, second),
            device=device,
            all_layers=all_layers,
            int8=self._int8_runs(device, network),
            verbose=self.verbose,
            desc=desc,
        )

    # ------------------------------------------------------------------ sklearn plumbing
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.string = True
        tags.input_tags.one_d_array = True
        tags.input_tags.two_d_array = True
        return tags

    # ------------------------------------------------------------------ export
    def save_pretrained(self, path):
        """Write the fitted encoder and its tokenizer as a Hugging Face checkpoint directory.

        The directory loads with ``transformers.AutoModel.from_pretrained`` and
        ``AutoTokenizer.from_pretrained``, and as ``model=path`` in any skbert estimator: the
        way to start one task from an encoder fine-tuned on another (Sun et al.'s multi-task
        recipe), or to share it. Only the encoder is written; the pooling and output layer are
        skbert's (:meth:`save` keeps the whole estimator), but ``pooling="pooler"``'s trained
        dense layer is written as the checkpoint's pooler. Nor is a sentence-transformers
        ``modules.json``: a :class:`~skbert.BertSentenceTransformer` with ``normalize="auto"``
        reads the folder's vectors unnormalised where ``model=fitted`` follows the fitted
        estimator's checkpoint (all-MiniLM-L6-v2: unit length); set ``normalize`` to match.

        Parameters
        ----------
        path : str or os.PathLike
            Directory to write (created if missing; files in it of the same names are
            overwritten).

        Returns
        -------
        str
            The directory written.

        Raises
        ------
        NotADirectoryError
            If ``path`` is an existing file.
        """
        check_is_fitted(self)
        path = check_output_dir(path, "path")
        network = self.fitted_network()
        with quiet_loading():  # no "Writing model shards" bar
            network.backbone.save_pretrained(path, state_dict=exported_backbone_state(network))
            self.tokenizer_.save_pretrained(path)
        return path

    def save(self, path):
        """Write the whole fitted estimator to a folder, in a format that runs no code on load.

        The folder holds the weights (the encoder with its pooling and output layer) as
        safetensors and everything else as JSON: the format version, the skbert version,
        the estimator's class, its parameters and every fitted attribute, plus the tokenizer
        (``save_pretrained``) and, for ``model=fitted_estimator``, that estimator's own save.
        :func:`skbert.load` reads it back and predicts bit for bit as this estimator does.
        A ``BertSentenceTransformer(memory=...)`` whose ``fit`` deferred loading the encoder
        (``deferred_network_``) loads it now, keeps it in ``network_`` and saves it.
        Unlike a pickle (``pickle``, ``joblib.dump``), which runs any code stored in it when
        it is loaded, nothing in the folder is unpickled: load folders from others with
        :func:`skbert.load`, never their pickles.

        Parameters
        ----------
        path : str or os.PathLike
            The folder to write: a new path, an empty folder or a previous save, which is
            replaced (``~`` is the home folder). The folder is written under a temporary name
            beside it and renamed at the end, so a failed save leaves nothing that loads (a
            save killed outright, by SIGKILL or a power cut, can leave that hidden
            ``.NAME.partial-*`` folder behind: it never loads; delete it).

        Returns
        -------
        str
            ``path``.

        Raises
        ------
        NotFittedError
            If the estimator is not fitted.
        NotADirectoryError
            If ``path`` is an existing file.
        FileExistsError
            If ``path`` is a folder with files in it that is not a previous save.
        ValueError
            If ``path`` is the working directory or a folder above it (which a save, replacing
            its folder as a whole, would remove from under the process).
        TypeError
            If an attribute or parameter holds a value the format cannot store (it is
            named); nothing is left out silently.
        FileNotFoundError
            If ``fit`` deferred loading the encoder (``memory=``) and its model folder is
            gone since.

        See Also
        --------
        skbert.load : Read the folder back.
        save_pretrained : Write only the encoder, as a Hugging Face checkpoint.

        Examples
        --------
        The folder loads back as the same class, which predicts as ``est`` does, bit for bit:

        >>> import skbert
        >>> texts = ["a gripping, beautiful film", "dull and far too long"]
        >>> est = skbert.BertSentenceTransformer().fit(texts)  # doctest: +SKIP
        >>> est.save("my-model")  # doctest: +SKIP
        'my-model'
        >>> loaded = skbert.load("my-model")  # doctest: +SKIP
        >>> type(loaded) is type(est)  # doctest: +SKIP
        True
        >>> bool((loaded.transform(texts) == est.transform(texts)).all())  # doctest: +SKIP
        True
        """
        return _persistence.save(self, path)

    # ------------------------------------------------------------------ pickling
    def __getstate__(self):
        # networks as safetensors (skbert._estimator.pickling); a copy of the state, as
        # object.__getstate__ returns the live __dict__ itself
        return pickled_state(self, dict(super().__getstate__()))

    def __setstate__(self, state):
        # rebuilt on the CPU: a model fitted on a GPU loads on a CPU-only machine
        state, finish = unpickled_state(self, state)
        super().__setstate__(state)
        finish()
