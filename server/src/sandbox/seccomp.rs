//! The seccomp filter every sandboxed process runs under (docs/sandbox.md): a deny list compiled
//! to classic BPF with `seccompiler` and handed to bubblewrap as a file descriptor.
//!
//! The list closes the kernel interfaces a namespace sandbox leaves reachable and code has no use
//! for: tracing other processes, mounting, keyrings, BPF, perf events, new namespaces, kexec and
//! modules, io_uring (which runs work outside these checks), swap, the clock, handles by inode,
//! userfaultfd; and making symlinks and FIFOs, which a server memory operation running at the
//! same time could be tricked into following or blocking on. A denied call fails with `EPERM`;
//! everything else is allowed.

/// The syscalls the filter denies.
#[cfg(target_os = "linux")]
const DENIED: &[i64] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_open_tree,
    libc::SYS_move_mount,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_syslog,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_clock_adjtime,
    libc::SYS_adjtimex,
    libc::SYS_fanotify_init,
    libc::SYS_lookup_dcookie,
    // No symlinks or FIFOs: the server's memory operations check a path and then use it, and code
    // running at the same time must not be able to swap a symlink (out of the memory folder) or a
    // FIFO (a read that never ends) in between.
    libc::SYS_symlinkat,
    libc::SYS_mknodat,
];

/// The same, for system calls only some architectures have.
#[cfg(target_arch = "x86_64")]
const DENIED_HERE: &[i64] = &[libc::SYS_symlink, libc::SYS_mknod];
#[cfg(all(target_os = "linux", not(target_arch = "x86_64")))]
const DENIED_HERE: &[i64] = &[];

/// The filter as bubblewrap reads it: the BPF instructions, each `struct sock_filter` in this
/// machine's byte order. An error names what could not be built (an unsupported architecture).
#[cfg(target_os = "linux")]
pub(crate) fn program() -> Result<Vec<u8>, String> {
    use std::collections::BTreeMap;

    use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|error| error.to_string())?;
    let rules: BTreeMap<i64, Vec<seccompiler::SeccompRule>> =
        DENIED.iter().chain(DENIED_HERE).map(|syscall| (*syscall, Vec::new())).collect();
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch)
        .map_err(|error| error.to_string())?;
    let program: BpfProgram = filter.try_into().map_err(|error: seccompiler::BackendError| error.to_string())?;
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for instruction in program {
        bytes.extend_from_slice(&instruction.code.to_ne_bytes());
        bytes.push(instruction.jt);
        bytes.push(instruction.jf);
        bytes.extend_from_slice(&instruction.k.to_ne_bytes());
    }
    Ok(bytes)
}

/// No seccomp off Linux (and no sandbox: the probe says so first).
#[cfg(not(target_os = "linux"))]
pub(crate) fn program() -> Result<Vec<u8>, String> {
    Err("seccomp filters exist only on Linux".to_owned())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn the_filter_compiles_to_whole_instructions() {
        let program = super::program().unwrap();
        assert!(!program.is_empty() && program.len().is_multiple_of(8), "{}", program.len());
    }
}
