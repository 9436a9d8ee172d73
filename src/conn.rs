//! hyper's own connections with the drain: [`Http1Sender`] and
//! [`Http2Sender`] (cargo feature `http2`), tower `Service`s over
//! `hyper::client::conn::{http1, http2}::SendRequest` whose responses come
//! back with the layer's drain, for a pool of yours or hyper-util's
//! `client::pool::cache` (which wants a `Service` per connection).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use tower_service::Service;

use std::sync::Arc;

use crate::body::DrainBody;
use crate::request::{LastOrigin, RequestInfo};
use crate::sending::Sending;
use crate::shared::Shared;

/// One of hyper's HTTP/1 connections (`client::conn::http1::SendRequest`)
/// as a tower `Service`, each response with the drain of the layer that
/// made it ([`DrainOnDropLayer::http1_sender`](crate::DrainOnDropLayer::http1_sender)): a body dropped early is
/// drained and the connection can send the next request. Requests may be
/// origin-form (`/path` with a `Host` header, as such connections are
/// sent): the origin is then the `Host` header, whose round trip the
/// drain's time budget follows (see
/// [`DrainOnDropLayer::sending`](crate::DrainOnDropLayer::sending)).
///
/// `poll_ready` is the connection's: ready when it can send (the previous
/// response's body read to its end, or drained).
pub struct Http1Sender<B> {
    sender: SendRequest<B>,
    shared: Arc<Shared>,
    last: LastOrigin,
}

impl<B> Http1Sender<B> {
    pub(crate) fn new(sender: SendRequest<B>, shared: Arc<Shared>) -> Self {
        Http1Sender { sender, shared, last: None }
    }

    /// The connection.
    pub fn get_ref(&self) -> &SendRequest<B> {
        &self.sender
    }

    /// The connection, mutably.
    pub fn get_mut(&mut self) -> &mut SendRequest<B> {
        &mut self.sender
    }

    /// Unwraps the connection.
    pub fn into_inner(self) -> SendRequest<B> {
        self.sender
    }
}

impl<B> fmt::Debug for Http1Sender<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Http1Sender").field("layer", &self.shared).finish_non_exhaustive()
    }
}

impl<B> Service<Request<B>> for Http1Sender<B>
where
    B: http_body::Body + Send + 'static,
{
    type Response = Response<DrainBody<Incoming>>;
    type Error = hyper::Error;
    /// Boxed: hyper's `send_request` future cannot be named.
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, hyper::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.sender.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let sending = Sending::new(RequestInfo::read(&self.shared, &req, &mut self.last));
        let response = self.sender.send_request(req);
        Box::pin(async move { Ok(sending.wrap_response(response.await?)) })
    }
}

/// One of hyper's HTTP/2 connections (`client::conn::http2::SendRequest`)
/// as a tower `Service`, each response with the drain of the layer that
/// made it ([`DrainOnDropLayer::http2_sender`](crate::DrainOnDropLayer::http2_sender)):
/// a body dropped early has its stream reset at once (unless it had all
/// arrived) and is counted (see the crate's [HTTP/2](crate#http2) section). Cheap to clone, like the
/// connection: one clone per caller.
///
/// Its origin is the URI's authority, or the layer's
/// [`default_origin`](crate::DrainOnDropLayer::default_origin).
#[cfg(feature = "http2")]
pub struct Http2Sender<B> {
    sender: hyper::client::conn::http2::SendRequest<B>,
    shared: Arc<Shared>,
    last: LastOrigin,
}

#[cfg(feature = "http2")]
impl<B> Http2Sender<B> {
    pub(crate) fn new(sender: hyper::client::conn::http2::SendRequest<B>, shared: Arc<Shared>) -> Self {
        Http2Sender { sender, shared, last: None }
    }

    /// The connection.
    pub fn get_ref(&self) -> &hyper::client::conn::http2::SendRequest<B> {
        &self.sender
    }

    /// Unwraps the connection.
    pub fn into_inner(self) -> hyper::client::conn::http2::SendRequest<B> {
        self.sender
    }
}

#[cfg(feature = "http2")]
impl<B> Clone for Http2Sender<B> {
    fn clone(&self) -> Self {
        Http2Sender { sender: self.sender.clone(), shared: self.shared.clone(), last: self.last.clone() }
    }
}

#[cfg(feature = "http2")]
impl<B> fmt::Debug for Http2Sender<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Http2Sender").field("layer", &self.shared).finish_non_exhaustive()
    }
}

#[cfg(feature = "http2")]
impl<B> Service<Request<B>> for Http2Sender<B>
where
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<DrainBody<Incoming>>;
    type Error = hyper::Error;
    /// Boxed: hyper's `send_request` future cannot be named.
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, hyper::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.sender.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let sending = Sending::new(RequestInfo::read(&self.shared, &req, &mut self.last));
        let response = self.sender.send_request(req);
        Box::pin(async move { Ok(sending.wrap_response(response.await?)) })
    }
}
