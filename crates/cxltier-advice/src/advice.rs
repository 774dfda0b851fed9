//! The planner's advice for one mix: weights per NUMA node for `apply --plan` and `run --plan`
//! (live machine only), weights per tier for `tierd --tune`'s start (live machine, else the
//! built-in profile), with the rules that make advice safe to act on.

use crate::live::live_profile;
use crate::AdviceError;
use cxltier_model::{plan, Action, Goal, PlanRequest, WeightPlan};
use cxltier_profile::{Mix, Profile, DEFAULT_BUILTIN};

/// The planner's advice for one mix on one machine, as `apply --plan` and `run --plan` use it.
#[derive(Debug, Clone, PartialEq)]
pub struct Advice {
    /// (NUMA node id, weight) pairs, fastest tier first; every node of a tier gets the tier's weight.
    pub pairs: Vec<(u32, u32)>,
    /// The advice is to keep the kernel's own `auto` weights (the pairs are those weights).
    pub keep_auto: bool,
}

/// The planner's advice for `mix` on the live machine. Fails when the machine has fewer than two
/// memory tiers with known performance, or the advice is not to interleave.
pub fn advise_live(mix: Mix) -> Result<Advice, AdviceError> {
    let profile = live_profile().map_err(|why| AdviceError::NoLiveProfile(Box::new(why)))?;
    advise(&profile, mix)
}

/// The planner's advice for `mix` on `profile` (bandwidth goal).
pub fn advise(profile: &Profile, mix: Mix) -> Result<Advice, AdviceError> {
    let plan = plan(profile, &PlanRequest::new(mix, Goal::Bandwidth))?;
    refuse_do_not_interleave(&plan)?;
    Ok(Advice {
        pairs: profile
            .tiers
            .iter()
            .zip(&plan.recommended.weights)
            .flat_map(|(t, &w)| t.nodes.iter().map(move |&n| (n, w)))
            .collect(),
        keep_auto: plan.recommended.action == Action::KeepAuto,
    })
}

/// Weighted interleave cannot express "leave everything on the fastest tier" (the kernel takes weights
/// 1..=255): say so instead of writing a weight of 0.
fn refuse_do_not_interleave(plan: &WeightPlan) -> Result<(), AdviceError> {
    if plan.recommended.action != Action::DoNotInterleave {
        return Ok(());
    }
    Err(AdviceError::DoNotInterleave {
        mix: plan.mix.to_string(),
        reason: plan.recommended.reason.clone(),
    })
}

/// A profile to plan on, and a note saying where it came from (for a header line).
pub struct ProfileChoice {
    pub profile: Profile,
    pub note: String,
}

impl ProfileChoice {
    /// The profile `spec` names (a built-in name or a path to a profile file), or without one
    /// the live machine's or the built-in profile ([`live_or_builtin`]).
    pub fn load(spec: Option<&str>) -> Result<ProfileChoice, AdviceError> {
        let Some(spec) = spec else {
            return Ok(live_or_builtin());
        };
        let profile = Profile::load(spec).map_err(AdviceError::ProfileFile)?;
        let note = format!("profile {} ({})", profile.name, profile.origin);
        Ok(ProfileChoice { profile, note })
    }
}

/// The live machine's profile when its firmware describes two or more tiers, otherwise the
/// built-in profile, with a note saying which and why.
pub fn live_or_builtin() -> ProfileChoice {
    match live_profile() {
        Ok(profile) => {
            let note = format!("live machine ({})", profile.source);
            ProfileChoice { profile, note }
        }
        Err(why) => {
            let profile = Profile::load(DEFAULT_BUILTIN).expect("built-in profile is valid");
            ProfileChoice {
                note: format!(
                    "built-in profile {DEFAULT_BUILTIN}, because {why}; pass --profile to choose"
                ),
                profile,
            }
        }
    }
}

/// The planner's weights for `mix` in tier order (fastest first), on the live machine or, when its
/// firmware gives no figures, on the built-in profile; with a note saying which.
pub fn tier_weights(mix: Mix) -> Result<(Vec<u32>, String), AdviceError> {
    let source = live_or_builtin();
    let plan = plan(&source.profile, &PlanRequest::new(mix, Goal::Bandwidth))?;
    Ok((plan.recommended.weights.clone(), source.note))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xeon6_plan(mix: Mix, goal: Goal) -> WeightPlan {
        let profile = Profile::load(DEFAULT_BUILTIN).unwrap();
        plan(&profile, &PlanRequest::new(mix, goal)).unwrap()
    }

    #[test]
    fn do_not_interleave_is_refused_rather_than_written_as_weight_zero() {
        let latency = xeon6_plan(Mix::READ_ONLY, Goal::Latency);
        assert_eq!(latency.recommended.weights, vec![1, 0]);
        let err = refuse_do_not_interleave(&latency).unwrap_err();
        assert!(
            err.to_string().contains("advises not interleaving"),
            "{err}"
        );
        assert!(refuse_do_not_interleave(&xeon6_plan(Mix::READ_ONLY, Goal::Bandwidth)).is_ok());
    }

    #[test]
    fn keep_auto_advice_is_flagged_for_apply() {
        let mut profile = Profile::load(DEFAULT_BUILTIN).unwrap();
        profile.tiers[0].nodes = vec![0, 1];
        profile.tiers[1].nodes = vec![2];
        // Mix R: the auto weights 23:8 are predicted as good as the best split.
        let advice = advise(&profile, Mix::READ_ONLY).unwrap();
        assert!(advice.keep_auto);
        assert_eq!(advice.pairs, vec![(0, 23), (1, 23), (2, 8)]);
        // Mix 1:1: 9:4 beats the auto weights by more than the model's error.
        let advice = advise(&profile, "1:1".parse().unwrap()).unwrap();
        assert!(!advice.keep_auto);
        assert_eq!(advice.pairs, vec![(0, 9), (1, 9), (2, 4)]);
    }
}
