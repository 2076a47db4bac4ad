//! `offload-probe slim` keeps files what they were, and a file it cannot
//! replace safely is an error for that file alone: owner, group, mode
//! (setuid included), extended attributes, file capabilities and ACLs are
//! kept in place, as `getfattr`, `getcap` and `getfacl` read them; a hard
//! link not named is never split off; `--output` never writes over an
//! input; a SIGKILL at any moment leaves the original or the verified
//! result and nothing else; an input truncated while it is read is an
//! error for it, and the other files are done.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::*;

/// The device every test slims for (a HIP library built here for gfx90a and
/// gfx1100 loses its gfx90a code).
const DEVICE: &str = "gfx1100";

fn probe() -> Option<PathBuf> {
    built("offload-probe")
}

/// Runs `offload-probe slim ARGS --json`: the process's output.
fn slim(probe: &Path, args: &[&str]) -> Output {
    Command::new(probe)
        .arg("slim")
        .args(args)
        .arg("--json")
        .env_remove("OFFLOAD_LOADER_DEVICES")
        .output()
        .unwrap()
}

/// The JSON report of `out`.
fn report(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A HIP shared library for gfx90a and gfx1100 (clang-22), copied to
/// `dir/name`.
fn library(dir: &Path, name: &str) -> Option<PathBuf> {
    let tc = toolchain()?;
    let lib = tc.build(Hip::new(&["gfx90a", "gfx1100"]).shared_library());
    let to = dir.join(name);
    std::fs::copy(&lib, &to).unwrap();
    Some(to)
}

/// Whether this process is root.
fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A tool's standard output, the tool required.
fn tool_output(cmd: &mut Command) -> String {
    String::from_utf8(run_ok(cmd).stdout).unwrap()
}

/// Every extended attribute of `file` as `getfattr` dumps them.
fn xattrs(getfattr: &Path, file: &Path) -> String {
    tool_output(
        Command::new(getfattr)
            .args(["--absolute-names", "-d", "-m", "-", "-e", "hex"])
            .arg(file),
    )
}

#[test]
fn in_place_keeps_owner_mode_attributes_capabilities_and_acls() {
    let Some(probe) = probe() else { return };
    let (Some(setfattr), Some(getfattr), Some(setfacl), Some(getfacl)) = (
        system_tool("setfattr", "attr"),
        system_tool("getfattr", "attr"),
        system_tool("setfacl", "acl"),
        system_tool("getfacl", "acl"),
    ) else {
        return;
    };
    let (Some(setcap), Some(getcap)) = (
        system_tool("setcap", "libcap2-bin"),
        system_tool("getcap", "libcap2-bin"),
    ) else {
        return;
    };
    if !root() {
        eprintln!("skipped: giving a file to nobody and setting capabilities needs root");
        return;
    }
    let dir = temp_dir();
    let Some(file) = library(&dir, "prog") else {
        return;
    };
    let before_len = std::fs::metadata(&file).unwrap().len();
    // nobody:nogroup, a user attribute, an ACL entry, a capability, then
    // setuid (chown and setcap would clear it).
    std::os::unix::fs::chown(&file, Some(65534), Some(65534)).unwrap();
    run_ok(
        Command::new(&setfattr)
            .args(["-n", "user.origin", "-v", "kept"])
            .arg(&file),
    );
    run_ok(Command::new(&setfacl).args(["-m", "u:daemon:r"]).arg(&file));
    run_ok(Command::new(&setcap).arg("cap_net_raw+ep").arg(&file));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let attributes = xattrs(&getfattr, &file);
    for name in [
        "user.origin",
        "security.capability",
        "system.posix_acl_access",
    ] {
        assert!(attributes.contains(name), "{attributes}");
    }
    let acl = tool_output(Command::new(&getfacl).arg("--absolute-names").arg(&file));
    let caps = tool_output(Command::new(&getcap).arg(&file));
    let before = std::fs::metadata(&file).unwrap();

    let out = slim(
        &probe,
        &[file.to_str().unwrap(), "--device", DEVICE, "--in-place"],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let r = report(&out);
    assert_eq!(r["files"][0]["written"], true, "{r}");
    assert_eq!(r["files"][0]["notes"], serde_json::json!([]), "{r}");
    let after = std::fs::metadata(&file).unwrap();
    assert!(after.len() < before_len);
    assert_ne!(after.ino(), before.ino(), "replaced, not rewritten");
    assert_eq!((after.uid(), after.gid()), (65534, 65534));
    assert_eq!(after.mode() & 0o7777, 0o4755);
    assert_eq!(xattrs(&getfattr, &file), attributes);
    assert_eq!(
        tool_output(Command::new(&getfacl).arg("--absolute-names").arg(&file)),
        acl
    );
    assert_eq!(tool_output(Command::new(&getcap).arg(&file)), caps);
    assert!(caps.contains("cap_net_raw=ep"), "{caps}");
    assert_eq!(listing(&dir), ["prog"]);
}

/// Not root, replacing a setuid file of root's (in a directory anyone may
/// write): the owner cannot be kept, so the setuid bit goes, and the
/// report says so.
#[test]
fn an_owner_that_cannot_be_kept_drops_setuid_and_says_so() {
    let Some(probe) = probe() else { return };
    let Some(setpriv) = system_tool("setpriv", "util-linux") else {
        return;
    };
    if !root() {
        eprintln!("skipped: making a file of root's for another user needs root");
        return;
    }
    // Where nobody can reach: the system's temporary directory.
    let dir = std::env::temp_dir().join(unique_name("slim-nobody"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let Some(file) = library(&dir, "prog") else {
        return;
    };
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let copy = dir.join("offload-probe");
    std::fs::copy(&probe, &copy).unwrap();
    let out = Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&copy)
        .args(["slim", file.to_str().unwrap(), "--device", DEVICE])
        .args(["--in-place", "--json"])
        .env_remove("OFFLOAD_LOADER_DEVICES")
        .output()
        .unwrap();
    let r = report(&out);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(0), "{r}");
    let notes = r["files"][0]["notes"].to_string();
    assert!(
        notes.contains("owner 0:0 is not kept") && notes.contains("setuid/setgid bits are dropped"),
        "{r}"
    );
}

#[test]
fn hard_links_are_never_split_and_output_never_writes_over_an_input() {
    let Some(probe) = probe() else { return };
    let dir = temp_dir();
    std::fs::create_dir_all(dir.join("a")).unwrap();
    std::fs::create_dir_all(dir.join("b")).unwrap();
    let Some(file) = library(&dir.join("a"), "lib.so") else {
        return;
    };
    let link = dir.join("b/other.so");
    std::fs::hard_link(&file, &link).unwrap();
    let bytes = std::fs::read(&file).unwrap();
    let ino = std::fs::metadata(&file).unwrap().ino();
    let intact = |why: &str| {
        for name in [&file, &link] {
            let m = std::fs::metadata(name).unwrap();
            assert_eq!((m.ino(), m.nlink()), (ino, 2), "{why}: {}", name.display());
            assert!(std::fs::read(name).unwrap() == bytes, "{why}");
        }
    };

    // A link not named: refused, both names the same untouched file.
    let out = slim(
        &probe,
        &[file.to_str().unwrap(), "--device", DEVICE, "--in-place"],
    );
    let r = report(&out);
    assert_eq!(out.status.code(), Some(2), "{r}");
    assert!(
        r["files"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("2 hard links")),
        "{r}"
    );
    intact("one link named");

    // --output onto the input's own folder, or onto a folder where another
    // name of it lies: refused before anything is written.
    let elsewhere = dir.join("b/lib.so");
    std::fs::hard_link(&file, &elsewhere).unwrap();
    for to in [dir.join("a"), dir.join("b")] {
        let out = slim(
            &probe,
            &[
                file.to_str().unwrap(),
                "--device",
                DEVICE,
                "--output",
                to.to_str().unwrap(),
            ],
        );
        let r = report(&out);
        assert_eq!(out.status.code(), Some(2), "{r}");
        assert!(
            r["errors"]
                .to_string()
                .contains("--output would write its result over the input"),
            "{r}"
        );
        assert_eq!(std::fs::metadata(&elsewhere).unwrap().ino(), ino);
    }
    std::fs::remove_file(&elsewhere).unwrap();
    intact("--output over the input");

    // What a killed slim could leave beside it is not an input.
    std::fs::write(dir.join("a/.lib.so.slim-result-999-0"), b"\x7fELF").unwrap();
    // Both names: both point at the one result.
    let out = slim(
        &probe,
        &[
            dir.join("a").to_str().unwrap(),
            link.to_str().unwrap(),
            "--device",
            DEVICE,
            "--in-place",
        ],
    );
    let r = report(&out);
    assert_eq!(out.status.code(), Some(0), "{r}");
    assert_eq!(r["files"].as_array().unwrap().len(), 1, "{r}");
    let (m, l) = (
        std::fs::metadata(&file).unwrap(),
        std::fs::metadata(&link).unwrap(),
    );
    assert_eq!((m.ino(), m.nlink()), (l.ino(), 2));
    assert_ne!(m.ino(), ino);
    assert!(m.len() < bytes.len() as u64);
    assert_eq!(listing(&dir.join("b")), ["other.so"]);
}

/// Byte for byte, in blocks (the files are a gigabyte).
fn same_bytes(a: &Path, b: &Path) -> bool {
    use std::io::Read;
    let (mut fa, mut fb) = (
        std::fs::File::open(a).unwrap(),
        std::fs::File::open(b).unwrap(),
    );
    if fa.metadata().unwrap().len() != fb.metadata().unwrap().len() {
        return false;
    }
    let (mut ba, mut bb) = (vec![0u8; 1 << 22], vec![0u8; 1 << 22]);
    loop {
        let n = fa.read(&mut ba).unwrap();
        if n == 0 {
            return true;
        }
        fb.read_exact(&mut bb[..n]).unwrap();
        if ba[..n] != bb[..n] {
            return false;
        }
    }
}

/// SIGKILL at 20 moments spread over an in-place run on a copy of
/// rocSPARSE: each time the file is the original (the same file, byte for
/// byte) or the result of a run not killed. Nothing else is in the
/// directory but, where a kill fell between naming the result and renaming
/// it over the file (Linux has no link that replaces), the complete result
/// under a hidden temporary name; the next run removes it and says so.
/// Where each kill lands does not matter: every outcome is checked.
#[test]
fn a_kill_leaves_the_original_or_the_result_and_nothing_else() {
    let Some(probe) = probe() else { return };
    let Some(lib) = rocsparse() else { return };
    let device = "gfx90a:sramecc+:xnack-";
    // The result of a run not killed, and how long a run takes.
    let reference = temp_dir();
    let done = reference.join("librocsparse.so.0");
    std::fs::copy(&lib, &done).unwrap();
    let start = std::time::Instant::now();
    let out = slim(
        &probe,
        &[done.to_str().unwrap(), "--device", device, "--in-place"],
    );
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    assert!(std::fs::metadata(&done).unwrap().len() < std::fs::metadata(&lib).unwrap().len());

    let dir = temp_dir();
    let file = dir.join("librocsparse.so.0");
    let mut fresh = true;
    let mut outcomes = [0u32; 2];
    let mut leftovers = 0;
    for i in 0..20u32 {
        if fresh {
            std::fs::copy(&lib, &file).unwrap();
        }
        let before = std::fs::metadata(&file).unwrap();
        let mut child = Command::new(&probe)
            .args(["slim", file.to_str().unwrap(), "--device", device])
            .arg("--in-place")
            .env_remove("OFFLOAD_LOADER_DEVICES")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(took * i / 20);
        let _ = child.kill();
        let _ = child.wait().unwrap();
        let (names, left): (Vec<String>, Vec<String>) = listing(&dir)
            .into_iter()
            .partition(|n| n == "librocsparse.so.0");
        assert_eq!(names, ["librocsparse.so.0"], "kill {i}");
        for name in &left {
            assert!(
                name.starts_with(".librocsparse.so.0.slim-link-"),
                "kill {i} left {name}"
            );
            assert!(same_bytes(&dir.join(name), &done), "kill {i}: {name}");
        }
        leftovers += left.len();
        let after = std::fs::metadata(&file).unwrap();
        if after.ino() == before.ino() {
            assert_eq!(
                (after.len(), after.mtime(), after.mtime_nsec()),
                (before.len(), before.mtime(), before.mtime_nsec()),
                "kill {i}"
            );
            assert!(same_bytes(&file, &lib), "kill {i}: the original changed");
            fresh = false;
        } else {
            assert!(same_bytes(&file, &done), "kill {i}: not the result");
            fresh = true;
        }
        outcomes[usize::from(fresh)] += 1;
    }
    eprintln!(
        "20 kills: {} left the original, {} the result, {leftovers} a result not yet renamed",
        outcomes[0], outcomes[1]
    );

    // What a killed run left (one made here, whatever the kills left) is
    // removed by the next run in that directory, which says so.
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    let left = dir.join(format!(".librocsparse.so.0.slim-link-{pid}-0"));
    std::fs::copy(&done, &left).unwrap();
    let out = slim(
        &probe,
        &[file.to_str().unwrap(), "--device", device, "--in-place"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    assert_eq!(listing(&dir), ["librocsparse.so.0"]);
    assert!(same_bytes(&file, &done));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(&format!(
            "removed {}, left by a run that was killed",
            left.display()
        )),
        "{said}"
    );
}

/// `pid`'s state letter in `/proc/PID/stat` (`None` once it is gone).
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// Stops `pid` and waits until it is stopped; whether it still runs.
fn stop(pid: u32) -> bool {
    // SAFETY: kill with a live child's pid and a signal number.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    loop {
        match state(pid) {
            Some('T' | 't') => return true,
            None | Some('Z' | 'X') => return false,
            _ => std::thread::yield_now(),
        }
    }
}

/// Two copies of rocSPARSE slimmed one after the other (one thread): the
/// run is stopped, step by step, until the second is mapped by its own
/// slimming (the first's result is written: the walk is over), then the
/// second is truncated to half and the run let go. The second is an error
/// ("changed while it was read"), the first is done, the process is not
/// killed by SIGBUS, and no file is left over. A step that finds the run
/// past the second file's final check (it then wrote a correct result)
/// counts as a miss, and the run is tried again.
#[test]
fn an_input_truncated_while_it_is_read_is_an_error_for_it_alone() {
    let Some(probe) = probe() else { return };
    let Some(lib) = rocsparse() else { return };
    let dir = temp_dir();
    let (a, b) = (dir.join("a.so"), dir.join("b.so"));
    std::fs::copy(&lib, &a).unwrap();
    let out = dir.join("out");
    for attempt in 0..5 {
        std::fs::copy(&lib, &b).unwrap();
        let _ = std::fs::remove_dir_all(&out);
        let child = Command::new(&probe)
            .args(["slim", a.to_str().unwrap(), b.to_str().unwrap()])
            .args(["--device", "gfx90a:sramecc+:xnack-", "--json", "--output"])
            .arg(&out)
            .env("RAYON_NUM_THREADS", "1")
            .env_remove("OFFLOAD_LOADER_DEVICES")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut truncated = false;
        while stop(pid) {
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
            if out.join("a.so").exists() && maps.lines().any(|l| l.ends_with(b.to_str().unwrap())) {
                let f = std::fs::OpenOptions::new().write(true).open(&b).unwrap();
                f.set_len(std::fs::metadata(&b).unwrap().len() / 2).unwrap();
                truncated = true;
            }
            // SAFETY: kill with a live child's pid and a signal number.
            unsafe { libc::kill(pid as i32, libc::SIGCONT) };
            if truncated {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let done = child.wait_with_output().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(done.status.signal(), None, "killed: {done:?}");
        let r = report(&done);
        assert_eq!(listing(&dir), ["a.so", "b.so", "out"], "{r}");
        assert_eq!(r["files"][0]["written"], true, "{r}");
        let error = r["files"][1]["error"].as_str().unwrap_or("").to_string();
        if error.contains("changed while it was read") {
            eprintln!("truncated on attempt {attempt}: {error}");
            assert_eq!(done.status.code(), Some(2), "{r}");
            // Copied as it is (as `cp -r` would, changing or not): the
            // tree holds every input file.
            assert_eq!(listing(&out), ["a.so", "b.so"], "{r}");
            assert!(
                r["tree"]["copied_as_is"].to_string().contains("b.so"),
                "{r}"
            );
            return;
        }
        // A miss: the second was read whole, and its result is right.
        assert_eq!(done.status.code(), Some(0), "attempt {attempt}: {r}");
        assert!(same_bytes(&out.join("a.so"), &out.join("b.so")));
    }
    panic!("the truncation never came while the second file was read");
}
