"""An SAE run as the tools use it: `sae=<run>` (a checkpoint file or a run directory of `python train.py
experiment=sae ...`), checked, with the model it was trained on, into which it is spliced.

    run = transformer_lab.load_sae("saved_models/sae/<run>")      # sae=<run> in the tools
    run.sae                     the SparseAutoencoder, in eval mode
    run.hook                    the hook point it reads, e.g. blocks.0.hook_attn_out
    run.source                  the source model's Checkpoint (transformer_lab.load), its task and examples
    run.model                   that model with the SAE spliced in at its hook (nn.sae.splice): outputs
                                unchanged, hook points `<hook>.sae.hook_sae_acts_post` etc. on the features

The file is read as any checkpoint from someone else is (`checkpoint.read_file`: a zip whose pickle
unpacks to little, tensors and plain values only), then: its config holds only known keys with values in
bounds (`SAEConfig`), every weight has the shape that config makes and is finite, and the memory it needs
is there. The source is found from the run's record (its location, the sha256 of its weights and the
hook); `source=` (a tool's `ckpt_path=`) may name it instead, and a model whose weights are not the ones
the SAE was trained on is refused in one line, before anything is spliced.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from transformer_lab.checkpoint import Checkpoint, load, read_file, resolve
from transformer_lab.errors import ConfigError, require
from transformer_lab.limits import require_memory
from transformer_lab.nn.sae import SparseAutoencoder, fingerprint, splice
from transformer_lab.nn.transcoder import Transcoder, TranscoderConfig, dictionary_config

if TYPE_CHECKING:
    from transformer_lab.nn import TokenModel

NOT_SAE = (
    "is not an SAE run (no SAE config 'sae' in its hyperparameters); sae= takes a checkpoint or run "
    "directory of python train.py experiment=sae ..."
)


def load_sae(
    location: str | Path,
    device: str | torch.device = "cpu",
    data_path: str | Path | None = None,
    source: str | Path | Checkpoint | None = None,
) -> SAECheckpoint:
    """The SAE run at `location` (a checkpoint file or a run directory; `saelens:<folder>`: an SAE saved
    by SAELens, `interop.sae_lens_import`), checked (the module docstring); `source`: its model, if not
    the one its record names (a location or a loaded Checkpoint)."""
    from transformer_lab.interop import sae_lens_import

    if sae_lens_import.is_saelens(location):
        return SAECheckpoint(sae_lens_import.read(str(location)), str(location), device, data_path, source)
    file = resolve(location)
    return SAECheckpoint(read(file, location), str(location), device, data_path, source)


def read(file: Path, location: str | Path) -> dict:
    """The file's contents, with the structure an SAE run has."""
    contents = read_file(file)
    where = str(location)
    require(
        isinstance(contents, dict) and isinstance(contents.get("hyper_parameters"), dict),
        f"{where} {NOT_SAE}",
    )
    hparams = contents["hyper_parameters"]
    require(isinstance(hparams.get("sae"), dict), f"{where} {NOT_SAE}")
    weights = contents.get("state_dict")
    require(
        isinstance(weights, dict)
        and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in weights.items()),
        f"{where}: state_dict must map names to tensors",
    )
    record = contents.get("task")
    require(record is None or isinstance(record, dict), f"{where}: its task record must be a mapping")
    source = (record or {}).get("source")
    require(
        source is None
        or (
            isinstance(source, dict)
            and all(isinstance(source.get(k), str) for k in ("location", "fingerprint", "hook"))
        ),
        f"{where}: its record of the source model must name its location, fingerprint and hook",
    )
    return contents


class SAECheckpoint:
    """An SAE run, checked, and its source model (the module docstring)."""

    def __init__(
        self,
        contents: dict,
        location: str = "sae",
        device: str | torch.device = "cpu",
        data_path: str | Path | None = None,
        source: str | Path | Checkpoint | None = None,
    ):
        self.location, self.contents = location, contents
        self.device = torch.device(device)
        self.data_path, self._source = data_path, source
        try:
            self.config = dictionary_config(contents["hyper_parameters"]["sae"])
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{location}: its SAE config is invalid: {exc}") from None
        self.weights = {
            k.removeprefix("net."): v for k, v in contents["state_dict"].items() if k.startswith("net.")
        }
        self._check_weights()

    def __repr__(self) -> str:
        c = self.config
        return f"SAECheckpoint({self.location!r}: {c.kind}, {c.width} features at {self.hook})"

    def _build(self) -> SparseAutoencoder | Transcoder:
        """The dictionary of its config, freshly made: an SAE or a transcoder."""
        kind = Transcoder if isinstance(self.config, TranscoderConfig) else SparseAutoencoder
        return kind(self.config)

    def _check_weights(self) -> None:
        with torch.device("meta"):
            skeleton = self._build()
        expected = skeleton.state_dict()
        for key, tensor in expected.items():
            found = self.weights.get(key)
            require(found is not None, f"{self.location} has no weight net.{key}, which its SAE has")
            require(
                tuple(found.shape) == tuple(tensor.shape),
                f"{self.location}: weight net.{key} has shape {tuple(found.shape)} but its config makes "
                f"{tuple(tensor.shape)}; the file does not match its own config",
            )
        extra = sorted(set(self.weights) - set(expected))
        require(
            not extra, f"{self.location} has a weight net.{extra[0] if extra else ''} its SAE does not have"
        )
        require_memory(
            8 * sum(t.numel() for t in expected.values()), f"the SAE of {self.location}", "it is too large"
        )
        for key in expected:
            require(
                bool(torch.isfinite(self.weights[key]).all()),
                f"{self.location} holds non-finite weights (net.{key}): the run it comes from diverged",
            )

    @property
    def hook(self) -> str:
        return self.config.hook

    @property
    def record(self) -> dict | None:
        """Where the source model is, the sha256 of its weights and the hook (an SAE from SAELens: its
        model's TransformerLens name and the hook); None for activations of no model (the synthetic and
        toy-model answer keys)."""
        return (self.contents.get("task") or {}).get("source")

    @cached_property
    def sae(self) -> SparseAutoencoder | Transcoder:
        sae = self._build()
        sae.load_state_dict(self.weights)
        return sae.to(self.device).eval()

    @cached_property
    def source(self) -> Checkpoint:
        """The model the SAE was trained on, checked to be it (its weights' sha256)."""
        record = self.record
        require(
            record is not None,
            f"{self.location} is an SAE of activations of no model (an answer key's); it has no model to "
            "splice into",
        )
        given = self._source
        if "fingerprint" not in record:  # an SAE from SAELens: its model has a TransformerLens name
            require(
                given is not None,
                f"{self.location} names its model by TransformerLens's name ({record.get('model_name')}), "
                "not a file this opens; pass the model with ckpt_path=",
            )
            return given if isinstance(given, Checkpoint) else load(given, self.device, self.data_path)
        if isinstance(given, Checkpoint):
            checkpoint, where = given, given.location
        else:
            where = str(given) if given is not None else record["location"]
            checkpoint = load(where, device=self.device, data_path=self.data_path)
        found = fingerprint(checkpoint.model)
        require(
            found == record["fingerprint"],
            f"{where} is not the model the SAE {self.location} was trained on (its weights' sha256 is "
            f"{found[:12]}..., the SAE's source {record['location']} had {record['fingerprint'][:12]}...); "
            + (
                "leave ckpt_path= out to use its own source"
                if given is not None
                else "its source has changed"
            ),
        )
        return checkpoint

    @cached_property
    def model(self) -> TokenModel:
        """The source model with the SAE spliced in at its hook (in place: the source's own model)."""
        if isinstance(self.config, TranscoderConfig):
            raise ConfigError(
                f"sae={self.location} is a transcoder (it reads {self.hook} and writes "
                f"{self.config.output_hook}), which the feature tools do not splice in yet; its measures are "
                "in its run's metrics.json"
            )
        model = self.source.model
        try:
            splice(model, self.sae, self.hook)
        except ValueError as exc:
            raise ConfigError(f"sae={self.location}: {exc}") from None
        return model
