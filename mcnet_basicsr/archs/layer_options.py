"""The grouped options of MCNetArch and PnPADMM as typed values: ``beta``, a network given with its weights and
MCNetArch's ``denoiser`` (which prior, and its level). Each maps the YAML form (a number or a dict) and documents its
defaults once."""
from dataclasses import dataclass, field, fields
from typing import Optional


@dataclass(frozen=True)
class BetaOptions:
    """The ``beta`` option of MCNetArch: the weight of the backbone's estimate in the layer's objective.

    In YAML a number (the initial beta) or a dict of these attributes.

    Attributes:
        init (float): The initial beta, > 0. Default: 0.01.
        learn (bool): Whether beta is trained (stored as ``log_beta``). Default: True.
        noise (bool): Let beta depend on the noise level of each sample, ``beta(sigma) = beta exp(g 255 sigma)``,
            ``sigma`` the noise std of the values a solve makes consistent (each of R, G, B; on Y that of Y) given to
            ``run``/``forward``, with ``g`` learned with beta (stored as ``log_beta_slope``, starting at ``slope``);
            without noise the layer is the same. Default: False.
        slope (float): With ``noise``, the initial ``g`` (per unit of 255 sigma): 0 gives every noise level the same
            beta; with ``learn: false`` it is the layer's fixed schedule. Default: 0.
    """

    init: float = 0.01
    learn: bool = True
    noise: bool = False
    slope: float = 0.0

    def __post_init__(self):
        init = self.init
        if isinstance(init, bool) or not isinstance(init, (int, float)) or not init > 0:
            raise ValueError(f'beta init must be a number > 0, got {init!r}.')
        object.__setattr__(self, 'init', float(init))
        for key in ('learn', 'noise'):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f'beta {key} must be true or false, got {getattr(self, key)!r}.')
        slope = self.slope
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f'beta slope must be a number, got {slope!r}.')
        if slope and not self.noise:
            raise ValueError(f'beta slope {slope} needs noise: true (beta depends on the noise level only then).')
        object.__setattr__(self, 'slope', float(slope))

    @classmethod
    def from_options(cls, beta):
        """From the option as written: None (the defaults), a number (``init``), a dict of the attributes, or a
        BetaOptions (returned as it is)."""
        if isinstance(beta, BetaOptions):
            return beta
        if beta is None:
            return cls()
        if isinstance(beta, (int, float)) and not isinstance(beta, bool):
            return cls(init=beta)
        keys = ('init', 'learn', 'noise', 'slope')
        if not isinstance(beta, dict):
            raise ValueError(f'beta must be a number or {{init, learn, noise, slope}}, got {beta!r}.')
        unknown = [k for k in beta if k not in keys]
        if unknown:
            raise ValueError(f'Unknown beta option(s) {unknown}; allowed are {list(keys)}.')
        return cls(**beta)


@dataclass(frozen=True)
class NetworkWeights:
    """A network option given with its weights, ``{<the network's own options>, path}`` (the ``denoiser`` option):
    the network's constructor checks its options, ``path`` is its checkpoint.

    Attributes:
        options (dict): The network's options (its defaults where left out). Default: {}.
        path (str | None): Its checkpoint. Default: None (random weights).
    """

    options: dict = field(default_factory=dict)
    path: Optional[str] = None

    @classmethod
    def from_options(cls, name, value):
        """From the option ``name`` as written: None (the defaults) or a dict of the network's options and this
        class's other attributes (``path``, ...), which are taken out of the network's options."""
        if isinstance(value, cls):
            return value
        own = [f.name for f in fields(cls) if f.name != 'options']
        if value is not None and not isinstance(value, dict):
            raise ValueError(f'{name} must be a dict of options (and {", ".join(own)}) or None, got {value!r}.')
        options = dict(value or {})
        return cls(options, **{key: options.pop(key) for key in own if key in options})


@dataclass(frozen=True)
class DenoiserOptions(NetworkWeights):
    """MCNetArch's ``denoiser`` option: the prior R, ``{arch, level, <the network's own options>, path}``.

    Attributes:
        arch (str): A registered arch: 'DnCNN' (``R(x)``, one noise level) or a prior told its noise level,
            ``forward(x, level)`` (its class has ``takes_level = True``; 'FFDNet'). Default: 'DnCNN'.
        level (float | None): A prior told its level: the initial level ``sp`` without LR noise (images in [0, 1]),
            from which the layer learns ``level(sigma) = sqrt(exp(2 a) + exp(2 c) sigma^2)``, ``a = log(sp)``,
            ``c = 0`` at the start. Required for such a prior, refused for DnCNN. Default: None.
    """

    arch: str = 'DnCNN'
    level: Optional[float] = None

    def __post_init__(self):
        level = self.level
        if level is not None and (isinstance(level, bool) or not isinstance(level, (int, float)) or not level > 0):
            raise ValueError(f'denoiser level must be a number > 0, got {level!r}.')
