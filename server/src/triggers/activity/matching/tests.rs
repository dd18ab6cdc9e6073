//! The matchers against resolved feed events shaped as `ListEvents` answers them.

use seed_agents_protocol::generated::{ActivitySource, SiteUpdateSource};
use serde_json::{Value as Json, json};

use super::*;

const AGENT: &str = "z6MkAgent";
const ALICE: &str = "z6MkAlice";
const DOC_OWNER: &str = "z6MkOwner";

fn event(value: Json) -> Event {
    match value {
        Json::Object(event) => event,
        _ => unreachable!(),
    }
}

/// A resolved comment by `author` on `hm://<DOC_OWNER>/doc`, embedding `mention` when given,
/// replying to a comment by `parent` when given.
fn comment(author: &str, mention: Option<&str>, parent: Option<&str>) -> Event {
    let annotations: Vec<Json> =
        mention.map(|link| json!({"type": "Embed", "starts": [0], "ends": [1], "link": link})).into_iter().collect();
    event(json!({
        "id": "bafyC", "type": "comment", "feedEventId": "blob-bafyC", "eventAtMs": 10,
        "author": {"id": {"uid": author, "id": format!("hm://{author}"), "path": []}},
        "comment": {
            "id": format!("{author}/z6tsid"), "version": "bafyC", "author": author,
            "targetAccount": DOC_OWNER, "targetPath": "/doc",
            "content": [{"block": {"type": "Paragraph", "id": "b1", "text": "x", "annotations": []},
                         "children": [{"block": {"type": "Paragraph", "id": "b2", "annotations": annotations}}]}]
        },
        "replyParentAuthor": parent.map(|uid| json!({"id": {"uid": uid, "id": format!("hm://{uid}")}})),
        "target": {"id": {"uid": DOC_OWNER, "id": format!("hm://{DOC_OWNER}/doc?v=bafyV"), "path": ["doc"]}},
        "targetAuthorUids": [DOC_OWNER],
    }))
}

fn mention(accounts: &[&str], prefix: Option<&str>) -> AgentActivitySource {
    AgentActivitySource::UserMentionSource(UserMentionSource {
        extra: Default::default(),
        mentioned_accounts: accounts.iter().map(|account| (*account).to_owned()).collect(),
        resource_prefix: prefix.map(str::to_owned),
    })
}

fn reply(accounts: &[&str]) -> AgentActivitySource {
    AgentActivitySource::CommentReplySource(CommentReplySource {
        extra: Default::default(),
        replied_to_accounts: accounts.iter().map(|account| (*account).to_owned()).collect(),
        resource_prefix: None,
    })
}

fn authored(accounts: &[&str]) -> AgentActivitySource {
    AgentActivitySource::DocumentAuthorCommentSource(DocumentAuthorCommentSource {
        extra: Default::default(),
        document_authors: accounts.iter().map(|account| (*account).to_owned()).collect(),
        resource_prefix: None,
    })
}

fn on_document(resource: &str, author: Option<&str>) -> AgentActivitySource {
    AgentActivitySource::DocumentCommentSource(DocumentCommentSource {
        extra: Default::default(),
        resource: resource.to_owned(),
        author: author.map(str::to_owned),
    })
}

fn site(prefix: &str, types: Option<&[&str]>) -> AgentActivitySource {
    AgentActivitySource::SiteUpdateSource(SiteUpdateSource {
        extra: Default::default(),
        resource_prefix: prefix.to_owned(),
        event_types: types.map(|types| types.iter().map(|kind| (*kind).to_owned()).collect()),
    })
}

#[test]
fn a_mention_is_an_embed_of_the_account_or_a_citation_of_it() {
    let profile = format!("hm://{AGENT}/:profile?v=bafy&l");
    assert!(matches(&mention(&[AGENT], None), &comment(ALICE, Some(&profile), None)));
    assert!(matches(&mention(&["z6MkOther", AGENT], None), &comment(ALICE, Some(&format!("hm://{AGENT}")), None)));
    // A link to a document of the account, authorship or a reply parent are no mention.
    assert!(!matches(&mention(&[AGENT], None), &comment(ALICE, Some(&format!("hm://{AGENT}/doc")), None)));
    assert!(!matches(&mention(&[AGENT], None), &comment(AGENT, None, Some(AGENT))));
    let citation = event(json!({
        "type": "citation", "citationType": "c", "feedEventId": "mention-bafyC--hm://z6MkAgent/:profile",
        "source": {"id": {"uid": ALICE, "id": format!("hm://{ALICE}")}},
        "target": {"id": {"uid": AGENT, "id": format!("hm://{AGENT}/:profile"), "path": [":profile"]}},
    }));
    assert!(matches(&mention(&[AGENT], None), &citation));
    assert!(!matches(&mention(&[ALICE], None), &citation));
    // The prefix filter reads the comment's ids (here the target document).
    let mentioned = comment(ALICE, Some(&profile), None);
    assert!(matches(&mention(&[AGENT], Some(&format!("hm://{DOC_OWNER}"))), &mentioned));
    assert!(!matches(&mention(&[AGENT], Some("hm://z6MkElsewhere")), &mentioned));
}

#[test]
fn a_reply_matches_its_parent_author_but_never_a_self_reply() {
    assert!(matches(&reply(&[AGENT]), &comment(ALICE, None, Some(AGENT))));
    assert!(!matches(&reply(&[AGENT]), &comment(AGENT, None, Some(AGENT))), "a self-reply");
    assert!(!matches(&reply(&[AGENT]), &comment(ALICE, None, Some(ALICE))));
    assert!(!matches(&reply(&[AGENT]), &comment(ALICE, None, None)), "a top-level comment");
}

#[test]
fn an_author_comment_is_on_their_document_and_not_their_own() {
    assert!(matches(&authored(&[DOC_OWNER]), &comment(ALICE, None, None)));
    assert!(!matches(&authored(&[DOC_OWNER]), &comment(DOC_OWNER, None, None)), "the author's own comment");
    assert!(!matches(&authored(&[AGENT]), &comment(ALICE, None, None)));
}

#[test]
fn document_comments_and_site_updates_follow_the_resource() {
    let on_doc = comment(ALICE, None, None);
    assert!(matches(&on_document(&format!("hm://{DOC_OWNER}/doc"), None), &on_doc));
    assert!(matches(&on_document(&format!("hm://{DOC_OWNER}"), None), &on_doc), "under the account");
    assert!(!matches(&on_document(&format!("hm://{DOC_OWNER}/other"), None), &on_doc));
    assert!(matches(&on_document(&format!("hm://{DOC_OWNER}/doc"), Some(ALICE)), &on_doc));
    assert!(!matches(&on_document(&format!("hm://{DOC_OWNER}/doc"), Some(AGENT)), &on_doc));

    let update =
        event(json!({"type": "doc-update", "id": "bafyU", "docId": {"id": format!("hm://{DOC_OWNER}/site/page")}}));
    assert!(matches(&site(&format!("hm://{DOC_OWNER}/site"), None), &update));
    assert!(matches(&site(&format!("hm://{DOC_OWNER}/site"), Some(&["change"])), &update), "an alias");
    assert!(!matches(&site(&format!("hm://{DOC_OWNER}/site"), Some(&["comment"])), &update));
    assert!(!matches(&site(&format!("hm://{DOC_OWNER}/sites"), None), &update));
    assert!(matches(&site(&format!("hm://{DOC_OWNER}"), Some(&["Comment"])), &on_doc));
}

#[test]
fn a_compound_source_reports_the_conditions_that_matched() {
    let condition = |id: &str, source| AgentActivityCondition { extra: Default::default(), id: id.to_owned(), source };
    let compound = AgentTriggerSource::ActivitySource(ActivitySource {
        extra: Default::default(),
        conditions: vec![
            condition("mention", mention(&[AGENT], None)),
            condition("reply", reply(&[AGENT])),
            condition("doc", authored(&[DOC_OWNER])),
        ],
    });
    let both = comment(ALICE, Some(&format!("hm://{AGENT}")), Some(AGENT));
    let Some(Matched::Conditions(matched)) = match_trigger(&compound, &both) else { panic!("no match") };
    let ids: Vec<&str> = matched.iter().map(|condition| condition.id.as_str()).collect();
    assert_eq!(ids, ["mention", "reply", "doc"]);
    assert_eq!(match_trigger(&compound, &comment(DOC_OWNER, None, None)), None);
    let single = AgentTriggerSource::CommentReplySource(CommentReplySource {
        extra: Default::default(),
        replied_to_accounts: vec![AGENT.to_owned()],
        resource_prefix: None,
    });
    assert_eq!(match_trigger(&single, &both), Some(Matched::Source));
}
