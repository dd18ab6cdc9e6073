//! Per-execution control groups (docs/sandbox.md): a `pids` group caps the processes of one
//! execution and a `memory` group its memory, tmpfs included, whoever the server runs as.
//!
//! `RLIMIT_NPROC` cannot do the first for a server running as root: the kernel does not enforce it
//! for processes whose real user is root, and a user namespace root creates maps to root. A group
//! counts every process put in it, so the wrapper that starts bubblewrap writes its own pid into
//! each group's `cgroup.procs` before it `exec`s, and every process of the sandbox is born inside.
//!
//! The groups live under `seed-agents-sandbox/` below the server's own group in each hierarchy
//! (cgroup v1 `pids` and `memory`, or cgroup v2 when its `pids` controller can be enabled there);
//! when neither can be written, there are none and only the rlimits apply.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The folder, below the server's own group, that holds the executions' groups.
const PARENT: &str = "seed-agents-sandbox";

/// A controller the sandbox uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Controller {
    /// Process count (`pids.max`).
    Pids,
    /// Memory (`memory.limit_in_bytes` on v1, `memory.max` on v2).
    Memory,
}

/// One hierarchy's parent folder for the executions' groups.
#[derive(Debug, Clone)]
struct Hierarchy {
    controllers: Vec<Controller>,
    /// cgroup v2 (the unified hierarchy) rather than v1.
    unified: bool,
    parent: PathBuf,
}

/// The hierarchies found usable at startup.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cgroups {
    hierarchies: Vec<Hierarchy>,
}

/// What one execution's groups hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    /// Processes (and threads) at once.
    pub(crate) pids: u64,
    /// Bytes of memory, page cache and tmpfs included.
    pub(crate) memory_bytes: u64,
}

/// One execution's groups, removed by [`Group::remove`] (or, failing that, on drop).
#[derive(Debug)]
pub(crate) struct Group {
    dirs: Vec<PathBuf>,
}

impl Cgroups {
    /// Finds the hierarchies whose `pids` or `memory` controller the server can give each
    /// execution a group of, creating the parent folder and removing groups a crash left there.
    pub(crate) fn discover() -> Self {
        let (Ok(mounts), Ok(membership)) =
            (std::fs::read_to_string("/proc/self/mountinfo"), std::fs::read_to_string("/proc/self/cgroup"))
        else {
            return Self::default();
        };
        let mut hierarchies = Vec::new();
        let have = |controller: Controller, hierarchies: &[Hierarchy]| {
            hierarchies.iter().any(|hierarchy| hierarchy.controllers.contains(&controller))
        };
        // cgroup v1: one mount per controller (or a few together).
        for line in membership.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(_), Some(names), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
            if names.is_empty() {
                continue;
            }
            let controllers: Vec<Controller> = names
                .split(',')
                .filter_map(|name| match name {
                    "pids" => Some(Controller::Pids),
                    "memory" => Some(Controller::Memory),
                    _ => None,
                })
                .filter(|controller| !have(*controller, &hierarchies))
                .collect();
            if controllers.is_empty() {
                continue;
            }
            let Some(mount) = v1_mount(&mounts, names) else { continue };
            let parent = mount.join(path.trim_start_matches('/')).join(PARENT);
            let hierarchy = Hierarchy { controllers, unified: false, parent };
            if hierarchy.set_up() {
                hierarchies.push(hierarchy);
            }
        }
        // cgroup v2, for what v1 did not give.
        let path = membership.lines().find_map(|line| line.strip_prefix("0::"));
        if let (Some(path), Some(mount)) = (path, v2_mount(&mounts)) {
            let own = mount.join(path.trim_start_matches('/'));
            let offered = std::fs::read_to_string(own.join("cgroup.controllers")).unwrap_or_default();
            let controllers: Vec<Controller> = offered
                .split_whitespace()
                .filter_map(|name| match name {
                    "pids" => Some(Controller::Pids),
                    "memory" => Some(Controller::Memory),
                    _ => None,
                })
                .filter(|controller| !have(*controller, &hierarchies))
                .collect();
            if !controllers.is_empty() {
                let hierarchy = Hierarchy { controllers, unified: true, parent: own.join(PARENT) };
                if hierarchy.set_up() {
                    hierarchies.push(hierarchy);
                }
            }
        }
        Self { hierarchies }
    }

    /// Whether executions get a group with `controller`.
    pub(crate) fn has(&self, controller: Controller) -> bool {
        self.hierarchies.iter().any(|hierarchy| hierarchy.controllers.contains(&controller))
    }

    /// Creates the groups of execution `id` with `caps`: the `cgroup.procs` files the wrapper
    /// joins. An error says which file could not be written.
    pub(crate) fn create(&self, id: &str, caps: Caps) -> Result<(Group, Vec<PathBuf>), String> {
        let mut group = Group { dirs: Vec::new() };
        let mut procs = Vec::new();
        for hierarchy in &self.hierarchies {
            let dir = hierarchy.parent.join(id);
            std::fs::create_dir(&dir).map_err(|error| format!("{}: {error}", dir.display()))?;
            group.dirs.push(dir.clone());
            for (file, value) in hierarchy.settings(caps) {
                write(&dir.join(file), &value)?;
            }
            procs.push(dir.join("cgroup.procs"));
        }
        Ok((group, procs))
    }
}

impl Hierarchy {
    /// The files and values that cap one execution.
    fn settings(&self, caps: Caps) -> Vec<(&'static str, String)> {
        let mut settings = Vec::new();
        for controller in &self.controllers {
            match (controller, self.unified) {
                (Controller::Pids, _) => settings.push(("pids.max", caps.pids.to_string())),
                (Controller::Memory, false) => settings.push(("memory.limit_in_bytes", caps.memory_bytes.to_string())),
                (Controller::Memory, true) => settings.push(("memory.max", caps.memory_bytes.to_string())),
            }
        }
        settings
    }

    /// Creates the parent (enabling the controllers for its children on v2), removes empty groups
    /// a crash left, and checks a group can be made and capped there.
    fn set_up(&self) -> bool {
        if std::fs::create_dir_all(&self.parent).is_err() {
            return false;
        }
        if self.unified {
            let names: Vec<&str> = self
                .controllers
                .iter()
                .map(|controller| match controller {
                    Controller::Pids => "+pids",
                    Controller::Memory => "+memory",
                })
                .collect();
            let Some(own) = self.parent.parent() else { return false };
            for dir in [own, self.parent.as_path()] {
                if write(&dir.join("cgroup.subtree_control"), &names.join(" ")).is_err() {
                    return false;
                }
            }
        }
        if let Ok(entries) = std::fs::read_dir(&self.parent) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                    let _ = std::fs::remove_dir(entry.path());
                }
            }
        }
        let probe = self.parent.join(format!("probe-{}", uuid::Uuid::new_v4()));
        if std::fs::create_dir(&probe).is_err() {
            return false;
        }
        let capped = self
            .settings(Caps { pids: 16, memory_bytes: 64 << 20 })
            .iter()
            .all(|(file, value)| write(&probe.join(file), value).is_ok());
        let _ = std::fs::remove_dir(&probe);
        capped
    }
}

impl Group {
    /// Removes the groups once their processes are gone (the kernel frees a group a moment after
    /// its last process is reaped, so an emptying group is retried for up to a second).
    pub(crate) async fn remove(mut self) {
        for dir in std::mem::take(&mut self.dirs) {
            for _ in 0..100 {
                match std::fs::remove_dir(&dir) {
                    Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    _ => break,
                }
            }
        }
    }

    /// [`Self::remove`] on a thread that may block (the start-up probe's).
    pub(crate) fn remove_blocking(mut self) {
        for dir in std::mem::take(&mut self.dirs) {
            for _ in 0..100 {
                match std::fs::remove_dir(&dir) {
                    Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    _ => break,
                }
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // An execution abandoned midway: one try each; the next start's sweep removes the rest.
        for dir in &self.dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Writes `value` to a control file.
fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|error| format!("{}: {error}", path.display()))
}

/// The mount point of the cgroup v1 hierarchy whose controllers are `names` (as
/// `/proc/self/cgroup` lists them).
fn v1_mount(mountinfo: &str, names: &str) -> Option<PathBuf> {
    let wanted: Vec<&str> = names.split(',').collect();
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut right = right.split(' ');
        if right.next()? != "cgroup" {
            return None;
        }
        let options: Vec<&str> = right.nth(1)?.split(',').collect();
        if !wanted.iter().all(|name| options.contains(name)) {
            return None;
        }
        Some(PathBuf::from(left.split(' ').nth(4)?))
    })
}

/// The mount point of the cgroup v2 hierarchy.
fn v2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if right.split(' ').next()? != "cgroup2" {
            return None;
        }
        Some(PathBuf::from(left.split(' ').nth(4)?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
30 25 0:26 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
31 25 0:27 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
32 25 0:28 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
33 25 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct";

    #[test]
    fn mounts_are_found_by_their_controllers() {
        assert_eq!(v1_mount(MOUNTINFO, "pids"), Some(PathBuf::from("/sys/fs/cgroup/pids")));
        assert_eq!(v1_mount(MOUNTINFO, "memory"), Some(PathBuf::from("/sys/fs/cgroup/memory")));
        assert_eq!(v1_mount(MOUNTINFO, "cpu,cpuacct"), Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct")));
        assert_eq!(v1_mount(MOUNTINFO, "blkio"), None);
        assert_eq!(v2_mount(MOUNTINFO), Some(PathBuf::from("/sys/fs/cgroup/unified")));
    }

    #[test]
    fn settings_follow_the_hierarchy_version() {
        let caps = Caps { pids: 70, memory_bytes: 1 << 29 };
        let v1 =
            Hierarchy { controllers: vec![Controller::Pids, Controller::Memory], unified: false, parent: "/x".into() };
        assert_eq!(
            v1.settings(caps),
            [("pids.max", "70".to_owned()), ("memory.limit_in_bytes", "536870912".to_owned())]
        );
        let v2 = Hierarchy { unified: true, ..v1 };
        assert_eq!(v2.settings(caps)[1], ("memory.max", "536870912".to_owned()));
    }
}
