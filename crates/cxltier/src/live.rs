//! A profile of the live machine, built from the firmware's performance tables as the kernel shows them.

use cxltier_profile::Profile;

/// The live machine as a profile, or why it cannot be one (fewer than two memory tiers, or a tier
/// whose performance the firmware does not describe).
pub fn live_profile() -> Result<Profile, String> {
    Err("live topology support is not built yet".into())
}
