"""The fit: simulator parameters from logs by least squares, and IMU biases from still periods.

`fit_replays` minimizes the whitened error between logged and replayed states with
`scipy.optimize.least_squares` (trust-region reflective, within each parameter's bounds), over
parameters in units of their typical size (params.Param.scale). The Jacobian is a forward
difference computed in one batched replay: every perturbation is a simulation of the same
batch, and parameters of different legs, which cannot affect each other's joints, are
perturbed together (one simulation per parameter slot of a leg, not per parameter).

Noise weights: a first pass uses nominal noise levels per signal (joint positions, velocities,
torques; velocities and body rates); the second re-weights each signal group by its residual
RMS from the first and restarts from its optimum, so each group counts by its own noise.

Uncertainty: the covariance s^2 (J^T J)^-1 of the whitened problem at the optimum (J the
Jacobian, s^2 the residual variance per degree of freedom), i.e. the Gauss-Newton / Cramer-Rao
estimate for independent Gaussian residuals. It leaves out correlated noise and model error
(the residuals of a real robot are correlated in time), so it is a lower bound; the report
gives it with the largest correlation of each parameter with another, and the randomization
widths have floors (calibration/apply.py).

IMU biases: over the logs' `still` phases, gyro bias = mean body rate; accelerometer bias =
mean of (reading - gravity in the body frame from the IMU's orientation); the standard error
of each mean (sample std / sqrt(n)).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from simreal.calibration.logs import ExperimentLog
from simreal.calibration.params import AXES, ParamSet
from simreal.calibration.replay import _Replay
from simreal.calibration.schema import UNITS, Estimate

GRAVITY = 9.81
NOISE = {"joint_pos": 0.01, "joint_vel": 0.2, "joint_effort": 0.3, "linear_velocity": 0.05,
         "angular_velocity": 0.1}  # first-pass weights (units of each signal)
FD_STEP = 1e-3  # forward-difference step, in units of each parameter's scale


@dataclass
class FitResult:
    names: list[str]
    nominal: np.ndarray
    x: np.ndarray
    std: np.ndarray
    max_corr: np.ndarray
    rms_before: dict[str, float]
    rms_after: dict[str, float]
    sigma: dict[str, float]
    nfev: int
    njev: int
    wall_s: float
    message: str
    extra: dict[str, Any] = field(default_factory=dict)


def _fd_groups(pset: ParamSet) -> list[list[int]]:
    """Columns perturbed together: one per parameter without a group; grouped ones (legs) by
    their rank within the group."""
    groups: list[list[int]] = []
    rank: dict[int | None, int] = {}
    by_rank: dict[int, list[int]] = {}
    for j, p in enumerate(pset.params):
        if p.group is None:
            groups.append([j])
            continue
        r = rank.get(p.group, 0)
        rank[p.group] = r + 1
        by_rank.setdefault(r, []).append(j)
    return groups + [by_rank[r] for r in sorted(by_rank)]


class _Problem:
    def __init__(self, replays: list[_Replay], pset: ParamSet,
                 say: Callable[[str], None]):
        self.replays, self.pset, self.say = replays, pset, say
        self.scale = pset.scale
        self.groups = _fd_groups(pset)
        self.sigma = [np.array([NOISE[n] for n in r.rows.names]) for r in replays]
        self.leg = np.concatenate([r.rows.leg for r in replays])
        self.param_leg = np.array([p.group if p.group is not None else -2
                                   for p in pset.params])
        self.nfev = self.njev = 0
        self.t0 = time.monotonic()

    def residuals_of(self, x: np.ndarray) -> np.ndarray:
        """(nvar, nrows) for parameter rows x (x-space)."""
        return np.concatenate([r.residuals(x, s) for r, s in zip(self.replays, self.sigma,
                                                                 strict=True)], axis=1)

    def fun(self, theta: np.ndarray) -> np.ndarray:
        self.nfev += 1
        return self.residuals_of((theta * self.scale)[None])[0]

    def jac(self, theta: np.ndarray) -> np.ndarray:
        self.njev += 1
        x = theta * self.scale
        steps = FD_STEP * self.scale
        rows = [x]
        signs = []
        for g in self.groups:
            xg = x.copy()
            s = np.where(x[g] + steps[g] > self.pset.upper[g], -1.0, 1.0)
            xg[g] += s * steps[g]
            rows.append(xg)
            signs.append(s)
        r = self.residuals_of(np.array(rows))
        jac = np.zeros((r.shape[1], len(x)))
        for gi, (g, s) in enumerate(zip(self.groups, signs, strict=True)):
            diff = r[gi + 1] - r[0]
            for j, sj in zip(g, s, strict=True):
                col = diff / (sj * FD_STEP)  # d r / d theta_j
                if len(g) > 1:  # grouped: only its leg's rows are its own
                    col = np.where(self.leg == self.param_leg[j], col, 0.0)
                jac[:, j] = col
        cost = 0.5 * float(r[0] @ r[0])
        self.say(f"Jacobian {self.njev}: cost {cost:.6g} ({len(rows)} simulations, "
                 f"{time.monotonic() - self.t0:.0f} s)")
        return jac

    def rms(self, x: np.ndarray) -> dict[str, float]:
        """Unweighted RMS error per signal group, over all replays."""
        out: dict[str, list[float]] = {}
        for rep in self.replays:
            err = rep.simulate(x[None])[0] - rep.measured
            for gi, name in enumerate(rep.rows.names):
                out.setdefault(name, []).extend(err[rep.rows.group == gi].tolist())
        return {k: float(np.sqrt(np.mean(np.square(v)))) for k, v in out.items()}

    def reweight(self, x: np.ndarray) -> None:
        for i, rep in enumerate(self.replays):
            err = rep.simulate(x[None])[0] - rep.measured
            self.sigma[i] = np.array([max(float(np.sqrt(np.mean(err[rep.rows.group == g] ** 2))),
                                          1e-9) for g in range(len(rep.rows.names))])


def fit_replays(replays: list[_Replay], x0: np.ndarray | None = None, max_nfev: int = 30,
                progress: bool = True, guess: bool = True) -> FitResult:
    """Least squares of every parameter of the replays' (shared) ParamSet, from x0 (default:
    the description's values) improved by the replays' initial guesses (`guess`). The error
    before is the description's."""
    pset = replays[0].pset
    for r in replays[1:]:
        if r.pset.names != pset.names:
            raise ValueError("replays of one fit must share their parameters")

    def say(text: str) -> None:
        if progress:
            print(f"simreal calibrate: {text}", file=sys.stderr, flush=True)

    prob = _Problem(replays, pset, say)
    before = prob.rms(pset.nominal)
    x0 = pset.nominal.copy() if x0 is None else np.asarray(x0, dtype=np.float64)
    for rep in replays if guess else []:
        x0 = rep.initial_guess(x0)
    lo, hi = pset.lower / pset.scale, pset.upper / pset.scale
    theta0 = np.clip(x0 / pset.scale, lo + 1e-9, hi - 1e-9)
    say(f"{len(pset.names)} parameters, {sum(len(r.measured) for r in replays)} residuals; "
        f"error before: " + ", ".join(f"{k} {v:.4g}" for k, v in before.items()))
    res = least_squares(prob.fun, theta0, jac=prob.jac, bounds=(lo, hi), method="trf",
                        x_scale=1.0, max_nfev=max_nfev, xtol=1e-10, ftol=1e-10)
    prob.reweight(res.x * pset.scale)
    say("re-weighted by the residuals: " + ", ".join(
        f"{n} {s:.3g}" for r, sig in zip(replays, prob.sigma, strict=True)
        for n, s in zip(r.rows.names, sig, strict=True)))
    res = least_squares(prob.fun, np.clip(res.x, lo + 1e-12, hi - 1e-12), jac=prob.jac,
                        bounds=(lo, hi), method="trf", x_scale=1.0,
                        max_nfev=max(3, max_nfev // 3), xtol=1e-10, ftol=1e-10)
    x = res.x * pset.scale
    jac = prob.jac(res.x)  # at the optimum, with the final weights
    m, n = jac.shape
    s2 = float(res.fun @ res.fun) / max(1, m - n)
    cov = s2 * np.linalg.pinv(jac.T @ jac)
    std_theta = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    d = np.where(std_theta > 0, std_theta, 1.0)
    corr = cov / d[:, None] / d[None, :]
    np.fill_diagonal(corr, 0.0)
    after = prob.rms(x)
    say("error after: " + ", ".join(f"{k} {v:.4g}" for k, v in after.items()))
    sigma = {n: float(s) for r, sig in zip(replays, prob.sigma, strict=True)
             for n, s in zip(r.rows.names, sig, strict=True)}
    return FitResult(pset.names, pset.nominal.copy(), x, std_theta * pset.scale,
                     np.abs(corr).max(axis=1) if n > 1 else np.zeros(n), before, after, sigma,
                     prob.nfev, prob.njev, round(time.monotonic() - prob.t0, 1),
                     str(res.message), {"reduced_chi2": s2, "at_bound": [
                         pset.names[i] for i in np.nonzero(res.active_mask)[0]]})


def fit_staged(stages: list[list[_Replay]], max_nfev: int = 30, progress: bool = True
               ) -> FitResult:
    """Fits in sequence, each started from the previous one's estimate (the first from the
    replays' initial guess): for go2, multiple shooting (JointSegmentReplay), whose residuals
    stay local and which converges from the description's values, then the single run over the
    whole log (JointReplay), which uses every sample's history (no restarts from noisy
    states). The result is the last stage's, with each stage's figures in extra["stages"]."""
    results: list[FitResult] = []
    x = None
    for i, replays in enumerate(stages):
        budget = max_nfev if i == 0 else max(5, max_nfev // 2 + 5)
        res = fit_replays(replays, x0=x, max_nfev=budget, progress=progress, guess=i == 0)
        results.append(res)
        x = res.x
    last = results[-1]
    last.extra["stages"] = [{"replay": type(st[0]).__name__, "nfev": r.nfev, "njev": r.njev,
                             "wall_s": r.wall_s, "rms_after": r.rms_after,
                             "optimizer": r.message} for st, r in zip(stages, results,
                                                                       strict=True)]
    last.nfev = sum(r.nfev for r in results)
    last.njev = sum(r.njev for r in results)
    last.wall_s = round(sum(r.wall_s for r in results), 1)
    return last


def estimates(result: FitResult) -> dict[str, Estimate]:
    out = {}
    for name, v, s, nom in zip(result.names, result.x, result.std, result.nominal,
                               strict=True):
        kind = name.rsplit(".", 1)[-1]
        out[name] = Estimate(value=float(v), std=float(s), nominal=float(nom),
                             unit=UNITS.get(kind, ""))
    return out


# --- IMU biases ----------------------------------------------------------------------------------
def _rotate_inverse(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """World vector v in the body frames of quaternions q (n, 4; w, x, y, z)."""
    q = q / np.linalg.norm(q, axis=1)[:, None]
    w, u = q[:, :1], -q[:, 1:]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


def imu_biases(logs: list[ExperimentLog], margin_s: float = 0.1
               ) -> tuple[dict[str, Estimate], dict[str, Any]]:
    """Gyro (and accelerometer) biases over the logs' still phases; with the sample counts."""
    gyro, acc = [], []
    for log in logs:
        for a, b in log.phases("still"):
            try:
                w = log.signal("angular_velocity").window(a + margin_s, b - margin_s)
            except ValueError:
                continue
            if not len(w.t):
                continue
            gyro.append(w.values["angular_velocity"])
            try:
                f = log.signal("linear_acceleration").window(a + margin_s, b - margin_s)
                q = log.signal("orientation").window(a + margin_s, b - margin_s)
            except ValueError:
                continue
            if len(f.t) and len(f.t) == len(q.t):
                g = _rotate_inverse(q.values["orientation"], np.array([0.0, 0.0, GRAVITY]))
                acc.append(f.values["linear_acceleration"] - g)
    out: dict[str, Estimate] = {}
    info: dict[str, Any] = {}
    for kind, chunks in (("gyro_bias", gyro), ("accel_bias", acc)):
        data = np.concatenate(chunks) if chunks else np.zeros((0, 3))
        if len(data) < 2:
            continue
        mean = data.mean(0)
        sem = data.std(0, ddof=1) / np.sqrt(len(data)) if len(data) > 1 else np.zeros(3)
        info[kind] = {"samples": len(data)}
        for i, axis in enumerate(AXES):
            out[f"imu.{kind}.{axis}"] = Estimate(value=float(mean[i]), std=float(sem[i]),
                                                 nominal=0.0, unit=UNITS[kind])
    return out, info
