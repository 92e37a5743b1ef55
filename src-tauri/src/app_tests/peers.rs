//! Pairing from Settings → Two Macs (`peer_pair`), through the IPC: the
//! right code pins the lender's key and makes the lender the peer Mac in the
//! stored settings (and the state the model list reads); a wrong one is
//! refused in the lender's words and changes nothing.

use serde_json::json;

use super::*;
use crate::peers::testing;

#[test]
fn pairing_from_the_settings_pins_the_key_and_names_the_peer_and_forget_undoes_it() {
    let (app, window) = app_with_window_in("peer-pair");
    let state = state_of(&app);
    let (address, key, lender) = testing::lender("482913");
    let paired = invoke(&window, "peer_pair", json!({ "address": address, "code": "482913" })).unwrap();
    lender.join().unwrap();
    assert_eq!(paired["machine"], testing::MACHINE, "{paired}");
    assert_eq!(paired["settings"]["peer"], address.as_str(), "{paired}");
    assert_eq!(invoke(&window, "settings_get", json!({})).unwrap()["peer"], address.as_str());
    assert_eq!(state.peer().as_deref(), Some(address.as_str()));
    assert_eq!(paired["allowed"], false, "{paired}");
    let list = invoke(&window, "peers_paired", json!({})).unwrap();
    assert_eq!(list[0]["address"], address.as_str(), "{list}");
    assert_eq!(list[0]["key"], key.as_str(), "{list}");
    assert_eq!(invoke(&window, "peer_forget", json!({ "address": address })).unwrap(), true);
    assert_eq!(invoke(&window, "peers_paired", json!({})).unwrap(), json!([]));
}

#[test]
fn a_wrong_code_or_no_lender_is_refused_with_its_code_and_changes_nothing() {
    let (app, window) = app_with_window_in("peer-refused");
    let state = state_of(&app);
    let (address, _, lender) = testing::lender("482913");
    let e = invoke(&window, "peer_pair", json!({ "address": address, "code": "111111" })).unwrap_err();
    lender.join().unwrap();
    assert_eq!(e["code"], "PEER_REFUSED", "{e}");
    assert_eq!(e["message"], format!("The Mac at {address} refused: wrong pairing code."));
    let nobody = testing::nobody();
    let e = invoke(&window, "peer_pair", json!({ "address": nobody, "code": "482913" })).unwrap_err();
    assert_eq!(e["code"], "PEER_UNREACHABLE", "{e}");
    assert!(e["message"].as_str().is_some_and(|m| m.starts_with(&format!("No answer from {nobody}"))), "{e}");
    assert_eq!(invoke(&window, "settings_get", json!({})).unwrap()["peer"], json!(null));
    assert_eq!(state.peer(), None);
    assert!(!state.locations.data_dir.join(crate::peers::PEERS_FILE).exists());
}
