//! The handshake as a session runs it: when it starts one, how it answers one, and what it
//! does with a message under a session it does not hold. The cryptography is in
//! [`crate::wire::handshake`], the table of sessions in [`super::pairs`].

use std::net::SocketAddr;
use std::time::Duration;

use crate::identity::auth::SIGNATURE_LEN;
use crate::identity::{NodeAddr, NodeId};
use crate::wire::handshake::{random_index, Ephemeral, Init, Response};
use crate::wire::versions::SESSIONS_SINCE;
use crate::wire::{
    Envelope, KIND_HANDSHAKE_CONFIRM, KIND_HANDSHAKE_INIT, KIND_HANDSHAKE_RESPONSE, MAX_MESSAGE_LEN,
};

use super::counts::count_kind;
use super::pairs::Pending;
use super::{Session, Transmit};

impl Session {
    /// Whether this node and `id` (by its latest `HELLO`) both speak the session form.
    fn speaks_sessions(&self, id: &NodeId) -> bool {
        self.peer_protocols(id)
            .is_some_and(|(_, spoken)| spoken >= SESSIONS_SINCE)
    }

    /// The verified identity heard most recently from `to`, if it speaks the session form.
    fn session_peer_at(&self, to: NodeAddr) -> Option<NodeId> {
        let (id, _) = self.senders.latest_at(to)?;
        self.speaks_sessions(id).then(|| id.clone())
    }

    /// Whether messages to `to` go signed now but will not for long: whoever is there
    /// speaks the session form and holds no session with this node yet (the first message
    /// sent to it starts the handshake). A sender keeps bulk (a sync's answer) to it small
    /// until then: each of its datagrams would cost a signature here and a check there.
    pub fn awaits_session(&self, now: Duration, to: SocketAddr) -> bool {
        let addr = NodeAddr::new(to);
        !self.authority.is_unsigned()
            && !self.pairs.holds(now, addr)
            && self.session_peer_at(addr).is_some()
    }

    /// Starts a handshake with whoever is at `to`, if it speaks the session form and no
    /// handshake with it is under way.
    pub(super) fn start_handshake<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        to: SocketAddr,
        out: &mut O,
    ) {
        let addr = NodeAddr::new(to);
        if self.authority.is_unsigned() || !self.pairs.may_start(now, addr) {
            return;
        }
        let Some(responder) = self.session_peer_at(addr) else {
            return;
        };
        let index = self.free_index();
        let ephemeral = Ephemeral::generate();
        let mut init = Vec::with_capacity(MAX_MESSAGE_LEN);
        init.push(KIND_HANDSHAKE_INIT);
        Init {
            initiator: self.local.clone(),
            responder: responder.clone(),
            index,
            ephemeral: *ephemeral.public(),
        }
        .encode(&mut init);
        self.seal(now, addr, &mut init);
        let signed = init[..init.len() - SIGNATURE_LEN].to_vec();
        self.pairs.start(
            addr,
            Pending {
                responder,
                index,
                ephemeral,
                init: signed,
                at: now,
            },
        );
        self.stats.handshakes_started += 1;
        count_kind(&mut self.stats.sent, &init);
        out.send(to, &init);
    }

    /// Answers a verified `HANDSHAKE_INIT` addressed to this identity with a
    /// `HANDSHAKE_RESPONSE`, and keeps the session (not used to send until the initiator
    /// uses it). Paced per address; refused if either side does not speak sessions.
    pub fn answer_handshake<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        envelope: &Envelope<'_>,
        out: &mut O,
    ) {
        let Ok(init) = Init::decode(envelope.body, &self.interner) else {
            self.stats.handshakes_refused += 1;
            return;
        };
        if init.responder != self.local || self.protocols.max() < SESSIONS_SINCE {
            self.stats.handshakes_refused += 1;
            return;
        }
        let to = init.initiator.socket_addr();
        match self.handshake_answers.take(now, init.initiator.node_addr()) {
            Ok(true) => {}
            Ok(false) => return,
            Err(()) => {
                self.stats.answers_withheld += 1;
                return;
            }
        }
        let index = self.free_index();
        let ephemeral = Ephemeral::generate();
        let mut response = Vec::with_capacity(MAX_MESSAGE_LEN);
        response.push(KIND_HANDSHAKE_RESPONSE);
        Response {
            responder: self.local.clone(),
            initiator: init.initiator.clone(),
            initiator_index: init.index,
            responder_index: index,
            ephemeral: *ephemeral.public(),
        }
        .encode(&mut response);
        self.seal(now, init.initiator.node_addr(), &mut response);
        let signed = &response[..response.len() - SIGNATURE_LEN];
        let Some(keys) = ephemeral.agree(&init.ephemeral, envelope.signed, signed, false) else {
            self.stats.handshakes_refused += 1;
            return;
        };
        self.pairs
            .agree(now, index, init.initiator, keys, init.index, false);
        count_kind(&mut self.stats.sent, &response);
        out.send(to, &response);
    }

    /// Completes our handshake with a verified `HANDSHAKE_RESPONSE`, and confirms the new
    /// session to the responder at once (a `HANDSHAKE_CONFIRM` under it).
    pub fn complete_handshake<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        envelope: &Envelope<'_>,
        out: &mut O,
    ) {
        let Ok(response) = Response::decode(envelope.body, &self.interner) else {
            self.stats.handshakes_refused += 1;
            return;
        };
        let addr = response.responder.node_addr();
        let pending = (response.initiator == self.local)
            .then(|| self.pairs.take_pending(addr, response.initiator_index))
            .flatten()
            .filter(|pending| pending.responder == response.responder);
        let Some(pending) = pending else {
            self.stats.handshakes_refused += 1;
            return;
        };
        let Some(keys) =
            pending
                .ephemeral
                .agree(&response.ephemeral, &pending.init, envelope.signed, true)
        else {
            self.stats.handshakes_refused += 1;
            return;
        };
        self.pairs.agree(
            now,
            pending.index,
            response.responder,
            keys,
            response.responder_index,
            true,
        );
        self.stats.handshakes_completed += 1;
        let mut confirm = Vec::with_capacity(MAX_MESSAGE_LEN);
        confirm.push(KIND_HANDSHAKE_CONFIRM);
        self.local.encode(&mut confirm);
        self.send(now, addr.socket_addr(), &mut confirm, out);
    }

    /// A message came under a session this node does not hold (it restarted, or forgot
    /// it): asks its sender for a `HELLO` and starts a handshake, paced per address.
    pub fn answer_lost_session<O: Transmit + ?Sized>(
        &mut self,
        now: Duration,
        sender: &NodeId,
        out: &mut O,
    ) {
        let to = sender.socket_addr();
        if self.may_answer(now, to) {
            self.send_hello(now, to, true, out);
            self.start_handshake(now, to, out);
        }
    }

    fn free_index(&self) -> u32 {
        loop {
            let index = random_index();
            if self.pairs.is_free(index) {
                return index;
            }
        }
    }
}
