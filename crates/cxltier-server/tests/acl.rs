//! Redis 7.0's ACL over sockets: users made with ACL SETUSER and opened with AUTH and HELLO,
//! the commands, keys and channels they are refused (NOPERM, and ACL LOG's entries), scripts
//! and transactions run as their caller, DELUSER closing a user's connections, `requirepass`
//! as the default user's password, and the replies of GETUSER, LIST, CAT, GENPASS and DRYRUN
//! in RESP2 and RESP3.

mod util;
use util::{Conn, Reply as V, ReplyExt, Server};

fn bulk(s: &str) -> String {
    format!("${}\r\n{s}\r\n", s.len())
}

const NOPERM_KEYS: &str =
    "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n";
const NOPERM_CHANNELS: &str =
    "-NOPERM this user has no permissions to access one of the channels used as arguments\r\n";
const WRONGPASS: &str = "-WRONGPASS invalid username-password pair or user is disabled.\r\n";

fn noperm_cmd(name: &str) -> String {
    format!("-NOPERM this user has no permissions to run the '{name}' command\r\n")
}

/// A connection opened as `user` with `pass`.
fn login(server: &Server, user: &str, pass: &str) -> Conn {
    let mut c = server.client();
    assert_eq!(c.cmd(&format!("AUTH {user} {pass}")), "+OK\r\n");
    c
}

#[test]
fn the_default_user_is_alone_at_start_and_can_do_everything() {
    let server = Server::start();
    let mut c = server.client();
    c.replies(&[
        ("ACL WHOAMI", &bulk("default")),
        ("ACL USERS", &format!("*1\r\n{}", bulk("default"))),
        (
            "ACL LIST",
            &format!("*1\r\n{}", bulk("user default on nopass ~* &* +@all")),
        ),
        ("SET k v", "+OK\r\n"),
        ("ACL LOG", "*0\r\n"),
    ]);
    assert!(c.cmd("CLIENT INFO").contains(" user=default "));
}

#[test]
fn a_user_is_refused_the_commands_keys_and_channels_its_rules_do_not_allow() {
    let server = Server::start();
    let mut admin = server.client();
    admin.replies(&[
        (
            "ACL SETUSER alice on >pw ~cached:* +get +set +acl|whoami",
            "+OK\r\n",
        ),
        ("SET other 1", "+OK\r\n"),
    ]);
    let mut alice = server.client();
    alice.replies(&[
        ("AUTH alice wrong", WRONGPASS),
        ("AUTH nobody pw", WRONGPASS),
        ("AUTH alice pw", "+OK\r\n"),
        ("ACL WHOAMI", &bulk("alice")),
        ("SET cached:1 x", "+OK\r\n"),
        ("GET cached:1", &bulk("x")),
        ("GET other", NOPERM_KEYS),
        ("LPUSH cached:2 x", &noperm_cmd("lpush")),
        ("ACL USERS", &noperm_cmd("acl|users")),
        ("CONFIG GET maxmemory", &noperm_cmd("config|get")),
        // AUTH needs no permission.
        ("AUTH alice pw", "+OK\r\n"),
    ]);
    assert!(alice
        .cmd("CLIENT INFO")
        .starts_with(&noperm_cmd("client|info")));
    assert!(admin.cmd("CLIENT LIST").contains(" user=alice "));
    // The log, newest first: the refusals and the failed AUTHs.
    let log = admin.call_line("ACL LOG");
    let entries = log.items();
    assert_eq!(entries.len(), 7, "{log:?}");
    let field = |i: usize, k: &str| {
        entries[i]
            .items()
            .chunks(2)
            .find(|p| p[0].text() == k)
            .unwrap()[1]
            .clone()
    };
    let expect = [
        ("command", "client|info", "alice"),
        ("command", "config|get", "alice"),
        ("command", "acl|users", "alice"),
        ("command", "lpush", "alice"),
        ("key", "other", "alice"),
        ("auth", "AUTH", "nobody"),
        ("auth", "AUTH", "alice"),
    ];
    for (i, (reason, object, user)) in expect.iter().enumerate() {
        assert_eq!(field(i, "reason").text(), *reason, "entry {i}");
        assert_eq!(field(i, "object").text(), *object, "entry {i}");
        assert_eq!(field(i, "username").text(), *user, "entry {i}");
        assert_eq!(field(i, "context").text(), "toplevel");
        assert_eq!(field(i, "count"), V::Int(1));
        assert!(field(i, "age-seconds").text().parse::<f64>().is_ok());
    }
    assert!(field(0, "client-info").text().contains(" user=alice "));
    // The same refusal again is counted in its entry.
    alice.replies(&[("GET other", NOPERM_KEYS)]);
    let log = admin.call_line("ACL LOG 1");
    let first = &log.items()[0];
    assert_eq!(first.items()[0].text(), "count");
    assert_eq!(first.items()[1], V::Int(2));
    assert_eq!(admin.call_line("ACL LOG").items().len(), 7);
    admin.replies(&[("ACL LOG RESET", "+OK\r\n"), ("ACL LOG", "*0\r\n")]);
    // Rules change for the connections already opened.
    admin.replies(&[("ACL SETUSER alice +lpush", "+OK\r\n")]);
    alice.replies(&[("LPUSH cached:2 x", ":1\r\n")]);
    // RESP3: the log's entries are maps.
    alice.replies(&[("GET other", NOPERM_KEYS)]);
    admin.replies_starting(&[("HELLO 3", "%7")]);
    assert!(admin
        .cmd("ACL LOG")
        .starts_with("*1\r\n%7\r\n$5\r\ncount\r\n:1\r\n$6\r\nreason\r\n$3\r\nkey\r\n"));
}

#[test]
fn read_and_write_key_patterns_follow_the_key_specs() {
    let server = Server::start();
    let mut admin = server.client();
    admin.replies(&[
        ("ACL SETUSER bob on nopass %R~r* %W~w* +@all", "+OK\r\n"),
        ("SET r1 a", "+OK\r\n"),
    ]);
    let mut bob = login(&server, "bob", "anything");
    bob.replies(&[
        ("GET r1", &bulk("a")),
        ("SET r1 b", NOPERM_KEYS),
        ("SET w1 b", "+OK\r\n"),
        ("GET w1", NOPERM_KEYS),
        // Read the source, write the destination.
        ("COPY r1 w2", ":1\r\n"),
        ("COPY w1 r2", NOPERM_KEYS),
        // A script's keys are checked as its command's.
        ("EVAL return 1 1 x", NOPERM_KEYS),
    ]);
    admin.replies(&[
        ("ACL DRYRUN bob get r1", "+OK\r\n"),
        (
            "ACL DRYRUN bob set r1 v",
            &bulk("This user has no permissions to access the 'r1' key"),
        ),
        (
            "ACL DRYRUN nobody get r1",
            "-ERR User 'nobody' not found\r\n",
        ),
        (
            "ACL DRYRUN bob nosuch r1",
            "-ERR Command 'nosuch' not found\r\n",
        ),
        (
            "ACL DRYRUN bob get",
            "-ERR wrong number of arguments for 'get' command\r\n",
        ),
    ]);
}

#[test]
fn channels_are_checked_for_publish_and_subscribe() {
    let server = Server::start();
    let mut admin = server.client();
    admin.replies(&[(
        "ACL SETUSER carol on >c +@all ~* resetchannels &news.* &exact",
        "+OK\r\n",
    )]);
    let mut carol = login(&server, "carol", "c");
    carol.replies(&[
        ("PUBLISH news.today hi", ":0\r\n"),
        ("PUBLISH sports hi", NOPERM_CHANNELS),
        ("SUBSCRIBE news.a sports", NOPERM_CHANNELS),
        // A pattern must be one of the user's patterns exactly.
        ("PSUBSCRIBE news*", NOPERM_CHANNELS),
    ]);
    let log = admin.call_line("ACL LOG 1");
    let e = log.items()[0].items();
    assert_eq!(
        (e[2].text(), e[3].text()),
        ("reason".into(), "channel".into())
    );
    assert_eq!(e[7].text(), "news*");
    // A new user gets acl-pubsub-default (resetchannels): no channel.
    admin.replies(&[("ACL SETUSER dan on >d +@all", "+OK\r\n")]);
    let mut dan = login(&server, "dan", "d");
    dan.replies(&[("PUBLISH news.today hi", NOPERM_CHANNELS)]);
    // Subscribed, carol loses the channel: her connection closes.
    carol.replies(&[(
        "SUBSCRIBE exact",
        "*3\r\n$9\r\nsubscribe\r\n$5\r\nexact\r\n:1\r\n",
    )]);
    admin.replies(&[("ACL SETUSER carol resetchannels &news.*", "+OK\r\n")]);
    assert!(carol.read_to_close().is_empty());
}

#[test]
fn deleting_a_user_closes_its_connections() {
    let server = Server::start();
    let mut admin = server.client();
    admin.replies(&[
        ("ACL SETUSER dave on >d +@all ~*", "+OK\r\n"),
        (
            "ACL DELUSER default",
            "-ERR The 'default' user cannot be removed\r\n",
        ),
    ]);
    let mut dave = login(&server, "dave", "d");
    dave.replies(&[("PING", "+PONG\r\n")]);
    admin.replies(&[
        ("ACL DELUSER dave nobody", ":1\r\n"),
        ("ACL USERS", &format!("*1\r\n{}", bulk("default"))),
    ]);
    assert!(dave.read_to_close().is_empty());
    let mut again = server.client();
    again.replies(&[("AUTH dave d", WRONGPASS)]);
    // A user deleting itself is answered, then closed.
    admin.replies(&[("ACL SETUSER erin on >e +@all", "+OK\r\n")]);
    let mut erin = login(&server, "erin", "e");
    erin.send_line("ACL DELUSER erin");
    assert_eq!(erin.read_to_close(), b":1\r\n");
}

#[test]
fn requirepass_is_the_default_user_s_password() {
    let server = Server::builder().requirepass("pw").start();
    let mut c = server.client();
    c.replies(&[
        ("GET k", "-NOAUTH Authentication required.\r\n"),
        ("AUTH wrong", WRONGPASS),
        ("AUTH pw", "+OK\r\n"),
        ("ACL WHOAMI", &bulk("default")),
        ("ACL SETUSER app on >s3cret ~* +@all", "+OK\r\n"),
    ]);
    let hash = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";
    let line = format!("ACL SETUSER hashed on #{hash} +ping");
    c.replies(&[(&line, "+OK\r\n")]);
    let mut other = server.client();
    other.replies_starting(&[
        ("HELLO 3 AUTH app wrong", "-WRONGPASS"),
        ("HELLO 3", "-NOAUTH HELLO must be called"),
        ("HELLO 3 AUTH app s3cret", "%7"),
    ]);
    other.replies(&[("ACL WHOAMI", &bulk("app")), ("AUTH hashed foo", "+OK\r\n")]);
    // CONFIG SET requirepass "" makes the default user nopass again.
    c.replies(&[("CONFIG SET requirepass ", "+OK\r\n")]);
    let mut third = server.client();
    third.replies(&[("GET k", "$-1\r\n")]);
}

#[test]
fn getuser_and_list_describe_users_as_redis_does() {
    let server = Server::start();
    let mut c = server.client();
    c.replies(&[
        (
            "ACL SETUSER u on >foo ~k* %R~r* &ch +get +config|get -@all +set +select|0",
            "+OK\r\n",
        ),
        ("ACL GETUSER nobody", "$-1\r\n"),
    ]);
    let hash = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae";
    let getuser = format!(
        "*12\r\n$5\r\nflags\r\n*1\r\n$2\r\non\r\n$9\r\npasswords\r\n*1\r\n{}$8\r\ncommands\r\n{}$4\r\nkeys\r\n{}$8\r\nchannels\r\n{}$9\r\nselectors\r\n*0\r\n",
        bulk(hash),
        bulk("-@all +select|0 +set"),
        bulk("~k* %R~r*"),
        bulk("&ch"),
    );
    assert_eq!(c.cmd("ACL GETUSER u"), getuser);
    assert_eq!(
        c.cmd("ACL LIST"),
        format!(
            "*2\r\n{}{}",
            bulk("user default on nopass ~* &* +@all"),
            bulk(&format!(
                "user u on #{hash} ~k* %R~r* resetchannels &ch -@all +select|0 +set"
            ))
        )
    );
    c.replies_starting(&[("HELLO 3", "%7")]);
    let resp3 = c.cmd("ACL GETUSER u");
    assert!(
        resp3.starts_with("%6\r\n$5\r\nflags\r\n~1\r\n$2\r\non\r\n$9\r\npasswords\r\n*1\r\n"),
        "{resp3}"
    );
    c.replies(&[("ACL GETUSER nobody", "_\r\n")]);
    // Bad rules change nothing and say why.
    c.replies(&[
        (
            "ACL SETUSER u +set +bogus",
            "-ERR Error in ACL SETUSER modifier '+bogus': Unknown command or category name in ACL\r\n",
        ),
        (
            "ACL SETUSER u ~* ~x",
            "-ERR Error in ACL SETUSER modifier '~x': Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns\r\n",
        ),
        ("ACL SETUSER u bogus", "-ERR Error in ACL SETUSER modifier 'bogus': Syntax error\r\n"),
        ("ACL SETUSER a\tb on", "-ERR Usernames can't contain spaces or null characters\r\n"),
    ]);
    assert!(c.cmd("ACL GETUSER u").contains(&bulk("~k* %R~r*")));
}

#[test]
fn cat_genpass_and_help() {
    let server = Server::start();
    let mut c = server.client();
    let cats = c.call_line("ACL CAT");
    assert_eq!(cats.items().len(), 21);
    assert_eq!(cats.items()[0].text(), "keyspace");
    let geo = c.call_line("ACL CAT geo");
    assert!(geo.items().iter().any(|i| i.text() == "geoadd"));
    assert!(!geo.items().iter().any(|i| i.text() == "get"));
    let dangerous = c.call_line("ACL CAT dangerous");
    assert!(dangerous.items().iter().any(|i| i.text() == "config|set"));
    c.replies(&[
        ("ACL CAT nope", "-ERR Unknown category 'nope'\r\n"),
        ("ACL GENPASS 0", "-ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096\r\n"),
        ("ACL GENPASS x", "-ERR value is not an integer or out of range\r\n"),
        ("ACL NOPE", "-ERR unknown subcommand or wrong number of arguments for 'NOPE'. Try ACL HELP.\r\n"),
        ("ACL LOAD", "-ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.\r\n"),
    ]);
    let pass = c.call_line("ACL GENPASS").text();
    assert_eq!(pass.len(), 64);
    assert!(pass.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(c.call_line("ACL GENPASS 5").text().len(), 2);
    assert!(c.cmd("ACL HELP").starts_with("*29\r\n+ACL <subcommand>"));
}

#[test]
fn scripts_and_transactions_run_as_their_caller() {
    let server = Server::start();
    let mut admin = server.client();
    admin.replies(&[("ACL SETUSER s on >s ~* +@all -lpush -set", "+OK\r\n")]);
    let mut s = login(&server, "s", "s");
    let script = s.call(&["EVAL", "return redis.call('lpush', 'l', 'x')", "0"]);
    assert_eq!(
        script.text(),
        "ERR The user executing the script can't run this command or subcommand"
    );
    let log = admin.call_line("ACL LOG 1");
    let e = log.items()[0].items();
    assert_eq!(e[5].text(), "lua");
    assert_eq!(e[7].text(), "lpush");
    // Refused when queued: EXEC aborts.
    s.replies(&[
        ("MULTI", "+OK\r\n"),
        ("SET k v", &noperm_cmd("set")),
        (
            "EXEC",
            "-EXECABORT Transaction discarded because of previous errors.\r\n",
        ),
    ]);
    // Denied between MULTI and EXEC.
    s.replies(&[
        ("MULTI", "+OK\r\n"),
        ("INCR n", "+QUEUED\r\n"),
        ("GET n", "+QUEUED\r\n"),
    ]);
    admin.replies(&[("ACL SETUSER s -incr", "+OK\r\n")]);
    s.replies(&[(
        "EXEC",
        "*2\r\n-NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: no permission to execute the command or subcommand\r\n$-1\r\n",
    )]);
}

#[test]
fn client_kill_by_user() {
    let server = Server::start();
    let mut admin = server.client();
    admin.replies(&[
        ("ACL SETUSER k on >k +@all", "+OK\r\n"),
        ("CLIENT KILL USER nobody", "-ERR No such user 'nobody'\r\n"),
    ]);
    let mut k = login(&server, "k", "k");
    k.replies(&[("PING", "+PONG\r\n")]);
    admin.replies(&[("CLIENT KILL USER k", ":1\r\n")]);
    assert!(k.read_to_close().is_empty());
}

#[test]
fn the_acl_file_is_loaded_at_start_saved_and_loaded_again_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.acl");
    std::fs::write(&path, "user app on >s3cret ~app:* +@all\n").unwrap();
    let server = Server::builder().acl_file(&path).start();
    let mut admin = server.client();
    admin.replies(&[
        (
            "ACL USERS",
            &format!("*2\r\n{}{}", bulk("app"), bulk("default")),
        ),
        (
            "CONFIG GET aclfile",
            &format!("*2\r\n{}{}", bulk("aclfile"), bulk(&path.to_string_lossy())),
        ),
    ]);
    let mut app = login(&server, "app", "s3cret");
    app.replies(&[("SET app:1 v", "+OK\r\n"), ("SET x v", NOPERM_KEYS)]);
    admin.replies(&[
        ("ACL SETUSER ops on >o +@admin", "+OK\r\n"),
        ("ACL SAVE", "+OK\r\n"),
    ]);
    let mut hash = |p: &str| {
        let c = admin.call(&["ACL", "GETUSER", p]);
        c.items()[3].items()[0].text()
    };
    let (app_hash, ops_hash) = (hash("app"), hash("ops"));
    let saved = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = saved.lines().collect();
    assert_eq!(lines.len(), 3, "{saved}");
    assert_eq!(
        lines[0],
        format!("user app on #{app_hash} ~app:* resetchannels +@all")
    );
    assert_eq!(lines[1], "user default on nopass ~* &* +@all");
    assert!(lines[2].starts_with(&format!(
        "user ops on #{ops_hash} resetchannels -@all +@admin"
    )));
    // A malformed file is refused whole: nothing changes.
    std::fs::write(
        &path,
        "user ops off\nuser bad on +nosuchcommand\nnonsense\n",
    )
    .unwrap();
    let p = path.to_string_lossy();
    admin.replies(&[
        (
            "ACL LOAD",
            &format!("-ERR {p}:2: Error in applying operation '+nosuchcommand': Unknown command or category name in ACL. {p}:3 should start with user keyword followed by the username.\r\n"),
        ),
        (
            "ACL USERS",
            &format!("*3\r\n{}{}{}", bulk("app"), bulk("default"), bulk("ops")),
        ),
    ]);
    app.replies(&[("PING", "+PONG\r\n")]);
    // A good one replaces every user: connections of users other than the default close.
    std::fs::write(&path, "user ops off\n").unwrap();
    admin.replies(&[
        ("ACL LOAD", "+OK\r\n"),
        (
            "ACL USERS",
            &format!("*2\r\n{}{}", bulk("default"), bulk("ops")),
        ),
        ("PING", "+PONG\r\n"),
    ]);
    assert!(app.read_to_close().is_empty());
}
