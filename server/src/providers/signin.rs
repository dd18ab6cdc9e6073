//! Subscription sign-ins in progress, and the lock that keeps one refresh per signed-in secret.
//!
//! A sign-in ([`Login`]) lives in memory only: it is started by `StartProviderOAuth`, ends when
//! its code is exchanged, it is canceled, replaced by the account's next sign-in, or 10 minutes
//! pass, and stays readable for 10 minutes after it ended so a polling client sees how. Time is
//! read lazily (every call takes `now`): an expired sign-in turns `failed` when next looked at,
//! with no timer. A restart forgets sign-ins in progress; the user starts again.
//!
//! The refresh lock is per `(account, secret)`: a turn that finds the access token about to
//! expire (or refused) holds it while it refreshes, so two turns never race two refreshes of one
//! refresh token; the second waits and then reads what the first stored.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use oauth2::PkceCodeVerifier;

use crate::model::oauth::{Begun, Issuer, parse_authorization_input};

/// How long a sign-in waits for its code (upstream's login timeout).
pub(crate) const LOGIN_TTL_MS: i64 = 10 * 60 * 1000;
/// How long an ended sign-in stays readable.
const FINISHED_TTL_MS: i64 = 10 * 60 * 1000;
/// Ended sign-ins kept per account (older ones are forgotten first).
const FINISHED_PER_ACCOUNT: usize = 4;

/// The sign-ins of every account, the issuer they talk to, and the refresh locks.
pub(crate) struct SignIns {
    issuer: Issuer,
    logins: Mutex<HashMap<String, Login>>,
    refreshing: Mutex<HashMap<SecretKey, Arc<tokio::sync::Mutex<()>>>>,
}

/// `(account, secret name)`.
type SecretKey = (String, String);

impl std::fmt::Debug for SignIns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignIns").field("issuer", &self.issuer).finish_non_exhaustive()
    }
}

struct Login {
    account_id: String,
    /// The `state` the redirect must carry back.
    state: String,
    /// Taken when the code is exchanged.
    verifier: Option<PkceCodeVerifier>,
    expires_at: i64,
    status: Status,
    finished_at: Option<i64>,
}

/// Where a sign-in stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// Waiting for its code.
    Pending,
    /// Its code is being exchanged (shown as pending).
    Exchanging,
    /// Signed in: the credentials are the account's secret of this name.
    Completed(String),
    /// Ended without credentials, for this reason.
    Failed(String),
}

/// A sign-in as `GetProviderOAuthStatus` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) status: Status,
    pub(crate) expires_at: i64,
}

/// What a submitted code claims: the code and the verifier to exchange it with.
pub(crate) struct Claimed {
    pub(crate) code: String,
    pub(crate) verifier: PkceCodeVerifier,
}

/// Why a submitted code was not taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No such sign-in for this account.
    NotFound,
    /// The sign-in already ended (or its code is being exchanged).
    NotPending,
    /// The input carries no code; the sign-in still waits.
    MissingCode,
    /// The redirect's `state` is not the sign-in's: the sign-in failed.
    StateMismatch,
}

/// Why a sign-in timed out, as its status says.
pub(crate) const TIMED_OUT: &str = "Sign-in timed out";
/// Why a sign-in was canceled.
pub(crate) const CANCELED: &str = "Sign-in canceled";
/// Why a sign-in was replaced.
pub(crate) const REPLACED: &str = "Replaced by a new sign-in";
/// Why a sign-in failed on a foreign `state`.
pub(crate) const STATE_MISMATCH: &str = "State mismatch";

impl SignIns {
    /// No sign-ins yet, against `issuer`.
    pub(crate) fn new(issuer: Issuer) -> Self {
        Self { issuer, logins: Mutex::new(HashMap::new()), refreshing: Mutex::new(HashMap::new()) }
    }

    /// The OAuth issuer.
    pub(crate) fn issuer(&self) -> &Issuer {
        &self.issuer
    }

    fn logins(&self) -> MutexGuard<'_, HashMap<String, Login>> {
        self.logins.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts a sign-in for `account_id` with what [`Issuer::begin`] made, replacing the
    /// account's pending one; its id and expiry.
    pub(crate) fn start(&self, account_id: &str, begun: Begun, now: i64) -> (String, i64) {
        let mut logins = self.logins();
        for login in logins.values_mut().filter(|login| login.account_id == account_id) {
            login.settle(now);
            if matches!(login.status, Status::Pending) {
                login.finish(Status::Failed(REPLACED.to_owned()), now);
            }
        }
        sweep(&mut logins, now);
        let id = uuid::Uuid::new_v4().to_string();
        let expires_at = now.saturating_add(LOGIN_TTL_MS);
        logins.insert(
            id.clone(),
            Login {
                account_id: account_id.to_owned(),
                state: begun.state,
                verifier: Some(begun.verifier),
                expires_at,
                status: Status::Pending,
                finished_at: None,
            },
        );
        (id, expires_at)
    }

    /// Takes a submitted code (a bare code or the redirect URL) for the exchange: the sign-in
    /// turns `Exchanging`. A `state` that is not the sign-in's fails it.
    pub(crate) fn claim(&self, account_id: &str, login_id: &str, input: &str, now: i64) -> Result<Claimed, Refusal> {
        let mut logins = self.logins();
        let login = logins.get_mut(login_id).filter(|login| login.account_id == account_id).ok_or(Refusal::NotFound)?;
        login.settle(now);
        if login.status != Status::Pending {
            return Err(Refusal::NotPending);
        }
        let (code, state) = parse_authorization_input(input);
        if state.is_some_and(|state| state != login.state) {
            login.finish(Status::Failed(STATE_MISMATCH.to_owned()), now);
            return Err(Refusal::StateMismatch);
        }
        let code = code.ok_or(Refusal::MissingCode)?;
        let verifier = login.verifier.take().ok_or(Refusal::NotPending)?;
        login.status = Status::Exchanging;
        Ok(Claimed { code, verifier })
    }

    /// Ends an exchanging sign-in with `outcome`. `false` when it is no longer exchanging (it was
    /// canceled meanwhile): then its credentials must not be stored.
    pub(crate) fn finish(&self, login_id: &str, outcome: Status, now: i64) -> bool {
        let mut logins = self.logins();
        match logins.get_mut(login_id) {
            Some(login) if login.status == Status::Exchanging => {
                login.finish(outcome, now);
                true
            }
            _ => false,
        }
    }

    /// Puts an exchanging sign-in back to waiting for its code, with its verifier (the issuer
    /// could not be reached, so nothing was decided).
    pub(crate) fn reopen(&self, login_id: &str, verifier: PkceCodeVerifier) {
        if let Some(login) = self.logins().get_mut(login_id)
            && login.status == Status::Exchanging
        {
            login.status = Status::Pending;
            login.verifier = Some(verifier);
        }
    }

    /// Turns a completed sign-in failed (its credentials could not be stored).
    pub(crate) fn fail_completed(&self, login_id: &str, error: String) {
        if let Some(login) = self.logins().get_mut(login_id)
            && matches!(login.status, Status::Completed(_))
        {
            login.status = Status::Failed(error);
        }
    }

    /// The sign-in `login_id` of `account_id`, as it stands at `now`.
    pub(crate) fn status(&self, account_id: &str, login_id: &str, now: i64) -> Option<Snapshot> {
        let mut logins = self.logins();
        let login = logins.get_mut(login_id).filter(|login| login.account_id == account_id)?;
        login.settle(now);
        Some(login.snapshot())
    }

    /// Cancels the sign-in `login_id` of `account_id` if it has not ended (an exchange in flight
    /// is abandoned: its credentials are not stored); how it stands afterwards.
    pub(crate) fn cancel(&self, account_id: &str, login_id: &str, now: i64) -> Option<Snapshot> {
        let mut logins = self.logins();
        let login = logins.get_mut(login_id).filter(|login| login.account_id == account_id)?;
        login.settle(now);
        if matches!(login.status, Status::Pending | Status::Exchanging) {
            login.finish(Status::Failed(CANCELED.to_owned()), now);
        }
        Some(login.snapshot())
    }

    /// The refresh lock of `(account_id, secret)`.
    pub(crate) fn refresh_lock(&self, account_id: &str, secret: &str) -> RefreshLock<'_> {
        let key = (account_id.to_owned(), secret.to_owned());
        let mut locks = self.refreshing.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let lock = locks.entry(key.clone()).or_default().clone();
        RefreshLock { owner: self, key, lock }
    }
}

/// One user of a refresh lock; the map forgets the lock when its last user is dropped.
pub(crate) struct RefreshLock<'a> {
    owner: &'a SignIns,
    key: SecretKey,
    lock: Arc<tokio::sync::Mutex<()>>,
}

impl RefreshLock<'_> {
    /// Waits for the lock.
    pub(crate) async fn lock(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.lock.lock().await
    }
}

impl Drop for RefreshLock<'_> {
    fn drop(&mut self) {
        let mut locks = self.owner.refreshing.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Ours and the map's: nobody else holds or waits for it.
        if Arc::strong_count(&self.lock) == 2 {
            locks.remove(&self.key);
        }
    }
}

impl Login {
    /// A pending sign-in past its expiry times out (an exchange in flight finishes on its own).
    fn settle(&mut self, now: i64) {
        if self.status == Status::Pending && now >= self.expires_at {
            self.finish(Status::Failed(TIMED_OUT.to_owned()), self.expires_at);
        }
    }

    fn finish(&mut self, status: Status, now: i64) {
        self.status = status;
        self.verifier = None;
        self.finished_at = Some(now);
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot { status: self.status.clone(), expires_at: self.expires_at }
    }
}

/// Forgets sign-ins that ended over [`FINISHED_TTL_MS`] ago (or expired that long ago without
/// being looked at), and all but the newest [`FINISHED_PER_ACCOUNT`] ended ones of each account.
fn sweep(logins: &mut HashMap<String, Login>, now: i64) {
    for login in logins.values_mut() {
        login.settle(now);
    }
    logins.retain(|_, login| login.finished_at.is_none_or(|at| now - at <= FINISHED_TTL_MS));
    let mut ended: HashMap<&str, Vec<(i64, &str)>> = HashMap::new();
    for (id, login) in logins.iter() {
        if let Some(at) = login.finished_at {
            ended.entry(&login.account_id).or_default().push((at, id));
        }
    }
    let mut forget = Vec::new();
    for mut ids in ended.into_values() {
        if ids.len() > FINISHED_PER_ACCOUNT {
            ids.sort_unstable();
            forget.extend(ids[..ids.len() - FINISHED_PER_ACCOUNT].iter().map(|(_, id)| id.to_string()));
        }
    }
    for id in forget {
        logins.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign_ins() -> SignIns {
        SignIns::new(Issuer::new("http://127.0.0.1:9").expect("issuer"))
    }

    fn start(sign_ins: &SignIns, account: &str, now: i64) -> (String, String) {
        let begun = sign_ins.issuer().begin();
        let state = begun.state.clone();
        (sign_ins.start(account, begun, now).0, state)
    }

    fn status(sign_ins: &SignIns, account: &str, id: &str, now: i64) -> Status {
        sign_ins.status(account, id, now).expect("known").status
    }

    #[test]
    fn a_code_is_claimed_once_and_finishes_the_sign_in() {
        let sign_ins = sign_ins();
        let (id, state) = start(&sign_ins, "a", 0);
        assert_eq!(
            sign_ins.status("a", &id, 0).unwrap(),
            Snapshot { status: Status::Pending, expires_at: LOGIN_TTL_MS }
        );
        // Another account sees nothing; input without a code leaves it waiting.
        assert_eq!(sign_ins.claim("b", &id, "c1", 0).err(), Some(Refusal::NotFound));
        assert_eq!(sign_ins.claim("a", &id, "  ", 0).err(), Some(Refusal::MissingCode));
        let url = format!("http://localhost:1455/auth/callback?code=c1&state={state}");
        let claimed = sign_ins.claim("a", &id, &url, 1).expect("claimed");
        assert_eq!(claimed.code, "c1");
        assert_eq!(status(&sign_ins, "a", &id, 1), Status::Exchanging);
        assert_eq!(sign_ins.claim("a", &id, "c2", 1).err(), Some(Refusal::NotPending));
        assert!(sign_ins.finish(&id, Status::Completed("openai-subscription-oauth".into()), 2));
        assert_eq!(status(&sign_ins, "a", &id, 2), Status::Completed("openai-subscription-oauth".into()));
        // Cancel after the end changes nothing.
        assert_eq!(sign_ins.cancel("a", &id, 3).unwrap().status, Status::Completed("openai-subscription-oauth".into()));
    }

    #[test]
    fn a_foreign_state_fails_the_sign_in() {
        let sign_ins = sign_ins();
        let (id, _) = start(&sign_ins, "a", 0);
        assert_eq!(sign_ins.claim("a", &id, "c1#forged", 0).err(), Some(Refusal::StateMismatch));
        assert_eq!(status(&sign_ins, "a", &id, 0), Status::Failed(STATE_MISMATCH.into()));
        assert_eq!(sign_ins.claim("a", &id, "c1", 0).err(), Some(Refusal::NotPending));
    }

    #[test]
    fn sign_ins_expire_and_are_forgotten() {
        let sign_ins = sign_ins();
        let (id, _) = start(&sign_ins, "a", 0);
        assert_eq!(status(&sign_ins, "a", &id, LOGIN_TTL_MS - 1), Status::Pending);
        assert_eq!(status(&sign_ins, "a", &id, LOGIN_TTL_MS), Status::Failed(TIMED_OUT.into()));
        assert_eq!(sign_ins.claim("a", &id, "c1", LOGIN_TTL_MS).err(), Some(Refusal::NotPending));
        // Readable for the finished TTL after it ended, then gone at the next start.
        let later = LOGIN_TTL_MS + FINISHED_TTL_MS + 1;
        start(&sign_ins, "b", later);
        assert!(sign_ins.status("a", &id, later).is_none());
    }

    #[test]
    fn a_new_sign_in_replaces_the_pending_one_and_cancel_abandons_an_exchange() {
        let sign_ins = sign_ins();
        let (first, _) = start(&sign_ins, "a", 0);
        let (other, _) = start(&sign_ins, "b", 0);
        let (second, _) = start(&sign_ins, "a", 1);
        assert_eq!(status(&sign_ins, "a", &first, 1), Status::Failed(REPLACED.into()));
        assert_eq!(status(&sign_ins, "b", &other, 1), Status::Pending);
        sign_ins.claim("a", &second, "c", 2).expect("claimed");
        assert_eq!(sign_ins.cancel("a", &second, 3).unwrap().status, Status::Failed(CANCELED.into()));
        // The exchange comes back after the cancel: not stored.
        assert!(!sign_ins.finish(&second, Status::Completed("s".into()), 4));
        assert_eq!(status(&sign_ins, "a", &second, 4), Status::Failed(CANCELED.into()));
    }

    #[test]
    fn ended_sign_ins_per_account_are_bounded() {
        let sign_ins = sign_ins();
        let ids: Vec<String> = (0..10).map(|at| start(&sign_ins, "a", at).0).collect();
        start(&sign_ins, "a", 20);
        let known = ids.iter().filter(|id| sign_ins.status("a", id, 20).is_some()).count();
        assert_eq!(known, FINISHED_PER_ACCOUNT);
        // The newest ended ones are the ones kept.
        assert!(sign_ins.status("a", &ids[9], 20).is_some());
    }

    #[tokio::test]
    async fn refresh_locks_are_shared_then_forgotten() {
        let sign_ins = sign_ins();
        let first = sign_ins.refresh_lock("a", "s");
        let second = sign_ins.refresh_lock("a", "s");
        let held = first.lock().await;
        assert!(second.lock.try_lock().is_err(), "one lock per secret");
        assert!(sign_ins.refresh_lock("a", "t").lock.try_lock().is_ok());
        drop(held);
        drop((first, second));
        assert!(sign_ins.refreshing.lock().unwrap().is_empty());
    }
}
