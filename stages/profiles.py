"""profiles: ε(δ) privacy profiles of every calibrated cube configuration → plots/profiles/."""

from empriv.stage import run_stage


def main(params):
    from empriv.privacy.profiles import cube_profiles, write_profile_plots

    n = params.data.n_train
    delta = params.delta_for(n)
    c = params.cube
    rows = cube_profiles(c.epsilon, c.batch_size, c.steps, n, delta, params.privacy.accountant)
    write_profile_plots(rows, delta)


if __name__ == "__main__":
    run_stage(main)
