//! The sandbox against a real bubblewrap (these fail, rather than skip, where it is missing).

use super::*;

fn sandbox(concurrency: usize, per_account: usize) -> Sandbox {
    let sandbox = Sandbox::new(Settings { enabled: true, concurrency, per_account });
    let availability = sandbox.availability();
    assert!(availability.available, "the sandbox must run here (install bubblewrap): {availability:?}");
    sandbox
}

fn request(runtime: Runtime, code: &str, workspace: &Path) -> ExecRequest {
    ExecRequest {
        account_id: "account".into(),
        runtime,
        code: code.into(),
        workspace: workspace.to_path_buf(),
        timeout: Duration::from_secs(30),
        progress: None,
    }
}

#[tokio::test]
async fn shell_and_python_run_in_the_workspace() {
    let sandbox = sandbox(2, 1);
    assert_eq!(sandbox.availability().runtimes, [Runtime::Python, Runtime::Shell]);
    assert!(sandbox.availability().limits.contains(&"seccomp"));
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("in.txt"), "from the host").unwrap();
    let outcome = sandbox
        .run(request(
            Runtime::Shell,
            "pwd; cat in.txt; echo; echo out > made.txt; echo oops >&2; exit 3",
            workspace.path(),
        ))
        .await
        .unwrap();
    assert_eq!(outcome.exit_code, Some(3));
    assert_eq!(outcome.stdout, "/workspace\nfrom the host\n");
    assert_eq!(outcome.stderr, "oops\n");
    assert!(!outcome.timed_out && !outcome.stdout_truncated);
    assert_eq!(std::fs::read_to_string(workspace.path().join("made.txt")).unwrap(), "out\n");

    let outcome = sandbox
        .run(request(Runtime::Python, "import os, sys\nprint(os.getcwd(), sys.version_info[0])", workspace.path()))
        .await
        .unwrap();
    assert_eq!((outcome.exit_code, outcome.stdout.as_str()), (Some(0), "/workspace 3\n"), "{}", outcome.stderr);
}

#[tokio::test]
async fn output_is_kept_to_its_cap_and_the_tail_is_reported() {
    let sandbox = sandbox(2, 1);
    let workspace = tempfile::tempdir().unwrap();
    let (sender, mut receiver) = mpsc::channel(64);
    let mut request = request(
        Runtime::Shell,
        "echo first; sleep 1; head -c 1000000 /dev/zero | tr '\\0' x; echo done >&2",
        workspace.path(),
    );
    request.progress = Some(sender);
    let outcome = sandbox.run(request).await.unwrap();
    assert_eq!(outcome.exit_code, Some(0));
    assert_eq!(outcome.stdout.len(), MAX_OUTPUT_BYTES);
    assert!(outcome.stdout.starts_with("first\nxxx") && outcome.stdout_truncated);
    assert_eq!((outcome.stderr.as_str(), outcome.stderr_truncated), ("done\n", false));
    let first = receiver.recv().await.expect("a progress report");
    assert!(first.output_tail.starts_with("first"), "{:?}", first.output_tail);
    let mut last = first;
    while let Some(report) = receiver.recv().await {
        last = report;
    }
    assert!(last.output_tail.chars().count() <= TAIL_CHARS);
}

#[tokio::test]
async fn a_timeout_kills_the_sandbox() {
    let sandbox = sandbox(2, 1);
    let workspace = tempfile::tempdir().unwrap();
    let mut request = request(Runtime::Shell, "echo started; while :; do :; done", workspace.path());
    request.timeout = Duration::from_secs(1);
    let outcome = sandbox.run(request).await.unwrap();
    assert!(outcome.timed_out);
    assert_eq!((outcome.exit_code, outcome.signal), (None, Some(9)));
    assert_eq!(outcome.stdout, "started\n");
}

#[tokio::test]
async fn executions_beyond_an_accounts_limit_wait_their_turn() {
    let sandbox = Arc::new(sandbox(4, 1));
    let workspace = tempfile::tempdir().unwrap();
    // Each execution appends its start and end; with one slot per account they never overlap.
    let code = "echo start >> log; sleep 0.3; echo end >> log";
    let runs: Vec<_> = (0..3)
        .map(|_| {
            let (sandbox, request) = (sandbox.clone(), request(Runtime::Shell, code, workspace.path()));
            tokio::spawn(async move { sandbox.run(request).await.unwrap() })
        })
        .collect();
    for run in runs {
        assert_eq!(run.await.unwrap().exit_code, Some(0));
    }
    let log = std::fs::read_to_string(workspace.path().join("log")).unwrap();
    assert_eq!(log, "start\nend\n".repeat(3));
    assert!(sandbox.accounts.lock().unwrap().is_empty(), "idle queues are dropped");
}

#[tokio::test]
async fn off_means_unavailable_with_a_reason() {
    let sandbox = Sandbox::new(Settings { enabled: false, concurrency: 1, per_account: 1 });
    assert_eq!(sandbox.availability().reason_code, Some("config-disabled"));
    let workspace = tempfile::tempdir().unwrap();
    let refused = sandbox.run(request(Runtime::Shell, "true", workspace.path())).await.unwrap_err();
    assert_eq!(refused.code, SandboxErrorCode::Unavailable);
}
