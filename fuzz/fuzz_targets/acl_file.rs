//! The ACL file (`cxltier_server::acl::parse_file`, what `ACL LOAD` and `--acl-file` read) on
//! arbitrary text, with the server's own command table: it must never panic, errors are values.
//! A file it accepts holds the default user, and every user it holds, written back as `ACL SAVE`
//! writes it, loads again with the same description (Redis panics when its description of a
//! user's commands does not rebuild them).
#![no_main]

use cxltier_server::acl::parse_file;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let catalog = cxltier_server::table::COMMANDS.acl();
    let users = match parse_file(text, "fuzz.acl", catalog, data.len() % 2 == 0, 1) {
        Ok(u) => u,
        Err(e) => {
            assert!(!e.is_empty());
            return;
        }
    };
    assert!(users.by_name(b"default").is_some(), "no default user");
    let lines: Vec<String> = users
        .iter()
        .map(|(_, u)| {
            format!(
                "user {} {}",
                String::from_utf8_lossy(&u.name),
                u.describe(catalog)
            )
        })
        .collect();
    let again = parse_file(&lines.join("\n"), "saved.acl", catalog, false, 1)
        .unwrap_or_else(|e| panic!("a saved file does not load: {e}\n{}", lines.join("\n")));
    for (_, u) in users.iter() {
        let back = again.by_name(&u.name).expect("every user saved");
        assert_eq!(back.describe(catalog), u.describe(catalog));
    }
});
