//! Who subscribes to what, server-wide (channels, patterns and shard channels), the messages
//! for other connections a command left, and how a message is framed: the pub/sub state below
//! the handlers, which the server delivers from after each turn.

use std::rc::Rc;

use hashbrown::HashMap;

use crate::resp::reply;

/// What a subscription is to: a channel, a pattern of channels, or a shard channel (Redis 7's
/// SSUBSCRIBE: a namespace of its own, which one server holds whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Channel,
    Pattern,
    Shard,
}

impl Kind {
    pub(crate) fn command(self, subscribe: bool) -> &'static str {
        match (self, subscribe) {
            (Kind::Channel, true) => "SUBSCRIBE",
            (Kind::Pattern, true) => "PSUBSCRIBE",
            (Kind::Shard, true) => "SSUBSCRIBE",
            (Kind::Channel, false) => "UNSUBSCRIBE",
            (Kind::Pattern, false) => "PUNSUBSCRIBE",
            (Kind::Shard, false) => "SUNSUBSCRIBE",
        }
    }
}

/// A message for another connection.
#[derive(Debug)]
pub struct Delivery {
    pub to: u64,
    /// The pattern it matched (a `pmessage`), or none (a `message`, or a shard channel's
    /// `smessage`).
    pub pattern: Option<Rc<[u8]>>,
    pub shard: bool,
    pub channel: Rc<[u8]>,
    pub payload: Rc<[u8]>,
}

/// Who subscribes to what, server-wide.
#[derive(Debug, Default)]
pub struct PubSub {
    pub channels: Subscribers,
    pub patterns: Subscribers,
    pub shard_channels: Subscribers,
    pub outbox: Vec<Delivery>,
}

impl PubSub {
    /// Connections with at least one subscription.
    pub fn subscribers(&self) -> usize {
        let ids: hashbrown::HashSet<u64> = self
            .channels
            .values()
            .chain(self.patterns.values())
            .chain(self.shard_channels.values())
            .flatten()
            .copied()
            .collect();
        ids.len()
    }
}

pub(crate) fn remove(map: &mut Subscribers, name: &[u8], id: u64) {
    if let Some(ids) = map.get_mut(name) {
        ids.retain(|&i| i != id);
        if ids.is_empty() {
            map.remove(name);
        }
    }
}

/// The subscribers of each name, server-wide.
pub type Subscribers = HashMap<Vec<u8>, Vec<u64>>;

/// Write one message as `proto` frames it: `message channel payload`, `pmessage pattern
/// channel payload` or `smessage channel payload`.
pub fn write_message(out: &mut Vec<u8>, proto: u8, d: &Delivery) {
    match &d.pattern {
        Some(p) => {
            reply::push(out, proto, 4);
            reply::bulk(out, b"pmessage");
            reply::bulk(out, p);
        }
        None => {
            reply::push(out, proto, 3);
            reply::bulk(out, if d.shard { b"smessage" } else { b"message" });
        }
    }
    reply::bulk(out, &d.channel);
    reply::bulk(out, &d.payload);
}

/// The messages of one publication: one per subscription of the channel, then one per
/// pattern subscription that matches it.
pub(crate) fn deliveries(ps: &PubSub, channel: &[u8], payload: &[u8]) -> Vec<Delivery> {
    let mut deliveries: Vec<Delivery> = Vec::new();
    if ps.channels.is_empty() && ps.patterns.is_empty() {
        return deliveries;
    }
    let channel_name = channel;
    let channel: Rc<[u8]> = Rc::from(channel);
    let payload: Rc<[u8]> = Rc::from(payload);
    if let Some(ids) = ps.channels.get(channel_name) {
        deliveries.extend(ids.iter().map(|&to| Delivery {
            to,
            pattern: None,
            shard: false,
            channel: channel.clone(),
            payload: payload.clone(),
        }));
    }
    for (pat, ids) in &ps.patterns {
        if crate::glob::matches(pat, channel_name, false) {
            let pat: Rc<[u8]> = Rc::from(&pat[..]);
            deliveries.extend(ids.iter().map(|&to| Delivery {
                to,
                pattern: Some(pat.clone()),
                shard: false,
                channel: channel.clone(),
                payload: payload.clone(),
            }));
        }
    }
    deliveries
}
