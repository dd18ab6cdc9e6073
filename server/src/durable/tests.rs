//! Tests of the durable writes: modes, symlinks, every failure leaving the target as it was and no
//! temp file behind, and a child process killed with SIGKILL at random moments while it rewrites
//! one file.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::*;

const OPTIONS: TempOptions = TempOptions { prefix: ".durable-test-", suffix: ".tmp", owner_only: false };
const PRIVATE: TempOptions = TempOptions { owner_only: true, ..OPTIONS };

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        fs::read_dir(dir).unwrap().map(|entry| entry.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}

/// The names in `dir` that are temp files of [`OPTIONS`].
fn temp_names(dir: &Path) -> Vec<String> {
    names(dir).into_iter().filter(|name| name.starts_with(OPTIONS.prefix) && name.ends_with(OPTIONS.suffix)).collect()
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn write_creates_then_replaces_with_the_default_mode_and_no_temp_file_left() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("a");
    write(&target, b"one", &OPTIONS).unwrap();
    assert_eq!(fs::read(&target).unwrap(), b"one");
    write(&target, b"second", &OPTIONS).unwrap();
    assert_eq!(fs::read(&target).unwrap(), b"second");
    // The same mode as a plain `fs::write`: 0666 less this process's umask.
    let reference = dir.path().join("reference");
    fs::write(&reference, b"").unwrap();
    assert_eq!(mode(&target), mode(&reference));
    assert_eq!(names(dir.path()), ["a", "reference"]);
}

#[test]
fn owner_only_files_are_0600_even_when_replacing_a_wider_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("key");
    fs::write(&target, b"old").unwrap();
    fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
    write(&target, b"new", &PRIVATE).unwrap();
    assert_eq!((mode(&target), fs::read(&target).unwrap()), (0o600, b"new".to_vec()));
    // A bare file name is written in the current directory's sense: `.` is its directory.
    assert_eq!(parent_of(Path::new("key")), Path::new("."));
    assert_eq!(parent_of(&target), dir.path());
}

#[test]
fn a_failed_write_changes_nothing_and_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    // A directory at the target: the rename fails and the directory is untouched.
    let occupied = dir.path().join("occupied");
    fs::create_dir(&occupied).unwrap();
    fs::write(occupied.join("inside"), b"kept").unwrap();
    let error = write(&occupied, b"bytes", &OPTIONS).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::IsADirectory, "{error}");
    assert_eq!(fs::read(occupied.join("inside")).unwrap(), b"kept");
    // A missing directory: nothing can be created.
    let error = write(&dir.path().join("missing/file"), b"bytes", &OPTIONS).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::NotFound, "{error}");
    // A temp file whose rename fails is removed.
    let temp = TempFile::create(dir.path(), &OPTIONS).unwrap();
    temp.file().write_all(b"bytes").unwrap();
    let error = temp.persist(&dir.path().join("missing/file")).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::NotFound, "{error}");
    assert_eq!(names(dir.path()), ["occupied"]);
}

#[test]
fn a_symlink_at_the_target_is_replaced_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    let link = dir.path().join("link");
    fs::write(&real, b"kept").unwrap();
    symlink(&real, &link).unwrap();
    write(&link, b"new", &OPTIONS).unwrap();
    assert_eq!(fs::read(&real).unwrap(), b"kept");
    assert!(fs::symlink_metadata(&link).unwrap().is_file());
    assert_eq!(fs::read(&link).unwrap(), b"new");
}

#[test]
fn an_unpersisted_temp_file_is_removed_when_dropped_also_inside_a_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let temp = TempFile::create(dir.path(), &OPTIONS).unwrap();
    temp.file().write_all(b"abandoned").unwrap();
    assert_eq!(temp_names(dir.path()).len(), 1);
    drop(temp);
    assert_eq!(names(dir.path()), Vec::<String>::new());

    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(async {
        let temp = TempFile::create(dir.path(), &OPTIONS).unwrap();
        drop(temp);
    });
    // Dropping the runtime waits for its blocking pool, where the removal went.
    drop(runtime);
    assert_eq!(names(dir.path()), Vec::<String>::new());
}

#[test]
fn move_into_place_moves_the_file_or_leaves_it_where_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let staged = dir.path().join("staged");
    fs::write(&staged, b"complete").unwrap();
    fs::set_permissions(&staged, fs::Permissions::from_mode(0o640)).unwrap();
    // A target in a missing directory: the staged file stays.
    let error = move_into_place(&staged, &dir.path().join("missing/target"), &OPTIONS).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::NotFound, "{error}");
    assert_eq!(fs::read(&staged).unwrap(), b"complete");

    let target = dir.path().join("target");
    fs::write(&target, b"old").unwrap();
    move_into_place(&staged, &target, &OPTIONS).unwrap();
    assert_eq!((fs::read(&target).unwrap(), mode(&target)), (b"complete".to_vec(), 0o640));
    assert_eq!(names(dir.path()), ["target"]);
    // Nothing to move.
    let error = move_into_place(&staged, &target, &OPTIONS).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::NotFound, "{error}");
    assert_eq!(fs::read(&target).unwrap(), b"complete");
}

/// From `/dev/shm` (a tmpfs) to the temp directory, where a rename fails with `EXDEV` and the
/// copy fallback runs; where both are one filesystem this is the plain move again.
#[test]
fn move_into_place_copies_across_filesystems() {
    let Ok(other) = tempfile::tempdir_in("/dev/shm") else { return };
    let dir = tempfile::tempdir().unwrap();
    let staged = other.path().join("staged");
    fs::write(&staged, b"across").unwrap();
    let target = dir.path().join("target");
    move_into_place(&staged, &target, &OPTIONS).unwrap();
    assert_eq!(fs::read(&target).unwrap(), b"across");
    assert!(!staged.exists(), "the source is removed once the copy is in place");
    assert_eq!(names(dir.path()), ["target"]);
}

#[test]
fn create_empty_refuses_anything_already_there() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("part");
    create_empty(&path).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().len(), 0);
    assert_eq!(create_empty(&path).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
    // A dangling symlink counts as something: nothing is created where it points.
    let link = dir.path().join("link");
    symlink(dir.path().join("elsewhere"), &link).unwrap();
    assert_eq!(create_empty(&link).unwrap_err().kind(), io::ErrorKind::AlreadyExists);
    assert!(!dir.path().join("elsewhere").exists());
    assert_eq!(create_empty(&dir.path().join("missing/part")).unwrap_err().kind(), io::ErrorKind::NotFound);
}

/// Set in the child process of the SIGKILL test: the directory it rewrites its file in.
const CHILD_DIR: &str = "SEED_AGENTS_DURABLE_CRASH_DIR";
/// The line the child prints once its first write is done and the loop begins.
const LOOPING: &str = "durable crash child: looping";
/// How many times the child is killed.
const KILLS: usize = 30;
/// The child stops by itself after this long, should its parent be gone.
const CHILD_LIFETIME: Duration = Duration::from_secs(60);

/// Two versions of the file: different lengths and different bytes almost everywhere, so a cut or
/// a mix of the two is neither.
fn versions() -> [Vec<u8>; 2] {
    [noise(1, 3 << 20), noise(2, (5 << 19) + 123)]
}

/// `len` pseudo-random bytes (xorshift64), the same for the same seed.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 56) as u8
    };
    (0..len).map(|_| next()).collect()
}

/// The child of [`a_sigkill_at_any_moment_leaves_one_whole_version`], run by re-executing this
/// test binary with [`CHILD_DIR`] set; without it (a normal test run) it does nothing. Writes the
/// first version, says so, then rewrites the file alternating the two versions until killed.
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else { return };
    let target = Path::new(&dir).join("target");
    let versions = versions();
    write(&target, &versions[0], &OPTIONS).unwrap();
    let mut stdout = io::stdout().lock();
    writeln!(stdout, "{LOOPING}").unwrap();
    stdout.flush().unwrap();
    let started = Instant::now();
    for round in 1.. {
        write(&target, &versions[round % 2], &OPTIONS).unwrap();
        if started.elapsed() > CHILD_LIFETIME {
            break;
        }
    }
}

/// SIGKILL keeps the page cache, so this checks what a process crash can show (the target is
/// always one whole version, never empty, cut or mixed, and each kill leaves at most the one temp
/// file the module documents); what a power cut could show rests on the fsyncs, which no test
/// can observe.
#[test]
fn a_sigkill_at_any_moment_leaves_one_whole_version() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    let versions = versions();
    let exe = std::env::current_exe().unwrap();
    let mut leftovers = 0;
    for round in 0..KILLS {
        let mut child = Command::new(&exe)
            .args(["--exact", "durable::tests::crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let looping = stdout.lines().map_while(Result::ok).any(|line| line.contains(LOOPING));
        assert!(looping, "round {round}: the child exited before its loop ({:?})", child.wait());
        let delay = Duration::from_micros(getrandom::u64().unwrap() % 40_000);
        std::thread::sleep(delay);
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(9), "round {round}: the child ended before the kill ({status})");

        let now = fs::read(&target).unwrap();
        assert!(
            versions.contains(&now),
            "round {round}, killed {delay:?} into the loop: the target has {} bytes, neither whole version",
            now.len()
        );
        let temps = temp_names(dir.path());
        let others: Vec<String> =
            names(dir.path()).into_iter().filter(|name| name != "target" && !temps.contains(name)).collect();
        assert_eq!(others, Vec::<String>::new(), "round {round}: unexpected files");
        assert!(temps.len() <= leftovers + 1, "round {round}: one kill left {} temp files", temps.len() - leftovers);
        leftovers = temps.len();
    }
    // Nearly all of the loop is spent between a temp file's creation and its rename.
    assert!(leftovers > 0, "no kill landed mid-write in {KILLS} rounds");
}

#[test]
fn temp_names_are_the_prefix_six_letters_or_digits_and_the_suffix() {
    assert!(OPTIONS.names(".durable-test-aB3dE9.tmp"));
    for name in [".durable-test-aB3dE.tmp", ".durable-test-aB3dE9x.tmp", ".durable-test-aB-dE9.tmp", "x.tmp", ""] {
        assert!(!OPTIONS.names(name), "{name}");
    }
    let bare = TempOptions { prefix: ".k-", suffix: "", owner_only: true };
    assert!(bare.names(".k-123456") && !bare.names(".k-123456.tmp"));
}

#[test]
fn leftovers_older_than_the_cutoff_are_removed_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::create_dir_all(root.join("sub/.durable-test-dirdir.tmp")).unwrap();
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    let plant = |name: &str, bytes: usize, old: bool| {
        let path = root.join(name);
        let file = File::create(&path).unwrap();
        file.set_len(bytes as u64).unwrap();
        if old {
            file.set_modified(hour_ago).unwrap();
        }
        path
    };
    let top = plant(".durable-test-aaaaaa.tmp", 100, true);
    let nested = plant("sub/.durable-test-bbbbbb.tmp", 20, true);
    let fresh = plant(".durable-test-cccccc.tmp", 5, false);
    let alike = plant(".durable-test-dddd.tmp", 5, true);
    let real = plant("sub/notes.md", 5, true);
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join(".durable-test-eeeeee.tmp");
    fs::write(&target, b"theirs").unwrap();
    File::options().write(true).open(&target).unwrap().set_modified(hour_ago).unwrap();
    symlink(&target, root.join(".durable-test-ffffff.tmp")).unwrap();
    symlink(outside.path(), root.join("linked")).unwrap();
    let cutoff = SystemTime::now() - Duration::from_secs(60);

    // Not recursive: the top directory only.
    assert_eq!(remove_leftovers(root, &[OPTIONS], cutoff, false).unwrap(), Removed { files: 1, bytes: 100 });
    assert!(!top.exists() && nested.exists());
    // Recursive: below too, never through a symlink, never a symlink, a directory or a new file.
    assert_eq!(remove_leftovers(root, &[OPTIONS], cutoff, true).unwrap(), Removed { files: 1, bytes: 20 });
    assert!(!nested.exists());
    for kept in [&fresh, &alike, &real, &target, &root.join(".durable-test-ffffff.tmp")] {
        assert!(fs::symlink_metadata(kept).is_ok(), "{} was removed", kept.display());
    }
    assert!(root.join("sub/.durable-test-dirdir.tmp").is_dir());
    assert_eq!(fs::read(&target).unwrap(), b"theirs");
    // A directory that is not there has nothing to remove, nor one reached through a symlink.
    assert_eq!(remove_leftovers(&root.join("missing"), &[OPTIONS], cutoff, true).unwrap(), Removed::default());
    assert_eq!(remove_leftovers(&root.join("linked"), &[OPTIONS], cutoff, true).unwrap(), Removed::default());
    assert!(target.exists());
}
