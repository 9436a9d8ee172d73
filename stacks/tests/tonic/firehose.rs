//! The `firehose.Firehose` gRPC service, written by hand as tonic-build
//! 0.14 would generate it from this proto (there is no protoc here):
//!
//! ```proto
//! syntax = "proto3";
//! package firehose;
//!
//! service Firehose {
//!   rpc Echo(EchoRequest) returns (EchoReply);
//!   // `count` messages of `message_bytes` each; endless when `count` is 0.
//!   rpc Subscribe(SubscribeRequest) returns (stream Chunk);
//! }
//! message EchoRequest { string message = 1; }
//! message EchoReply { string message = 1; }
//! message SubscribeRequest { uint32 message_bytes = 1; uint64 count = 2; }
//! message Chunk { uint64 seq = 1; bytes data = 2; }
//! ```
//!
//! The messages are prost's (`#[derive(prost::Message)]`), the codec
//! `tonic_prost::ProstCodec`, the client a `tonic::client::Grpc<T>` over any
//! `GrpcService`, the server a `NamedService` routing by path to
//! `tonic::server::Grpc::unary` and `server_streaming`. Only the service
//! trait differs: its methods return `impl Future` where tonic-build writes
//! `#[async_trait]` (tonic's `codegen` feature, left off).

// `pub` as tonic-build writes it, in a test's private module.
#![allow(unreachable_pub)]

#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoRequest {
    #[prost(string, tag = "1")]
    pub message: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EchoReply {
    #[prost(string, tag = "1")]
    pub message: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct SubscribeRequest {
    /// Bytes of `data` in each message.
    #[prost(uint32, tag = "1")]
    pub message_bytes: u32,
    /// Messages in all; 0: endless.
    #[prost(uint64, tag = "2")]
    pub count: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Chunk {
    #[prost(uint64, tag = "1")]
    pub seq: u64,
    #[prost(bytes = "bytes", tag = "2")]
    pub data: bytes::Bytes,
}

type StdError = Box<dyn std::error::Error + Send + Sync + 'static>;
type BoxFuture<T, E> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, E>> + Send + 'static>>;

pub mod firehose_client {
    use super::*;

    #[derive(Debug, Clone)]
    pub struct FirehoseClient<T> {
        inner: tonic::client::Grpc<T>,
    }

    impl<T> FirehoseClient<T>
    where
        T: tonic::client::GrpcService<tonic::body::Body>,
        T::Error: Into<StdError>,
        T::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        <T::ResponseBody as http_body::Body>::Error: Into<StdError> + Send,
    {
        /// Requests carry path-only URIs (`/firehose.Firehose/Echo`): a
        /// `Channel` adds its endpoint's origin below any layer.
        pub fn new(inner: T) -> Self {
            let inner = tonic::client::Grpc::new(inner);
            Self { inner }
        }

        /// Requests carry `origin`'s scheme and authority.
        pub fn with_origin(inner: T, origin: http::Uri) -> Self {
            let inner = tonic::client::Grpc::with_origin(inner, origin);
            Self { inner }
        }

        pub async fn echo(
            &mut self,
            request: impl tonic::IntoRequest<EchoRequest>,
        ) -> Result<tonic::Response<EchoReply>, tonic::Status> {
            self.inner
                .ready()
                .await
                .map_err(|e| tonic::Status::unknown(format!("Service was not ready: {}", e.into())))?;
            let codec = tonic_prost::ProstCodec::default();
            let path = http::uri::PathAndQuery::from_static("/firehose.Firehose/Echo");
            let mut req = request.into_request();
            req.extensions_mut().insert(tonic::GrpcMethod::new("firehose.Firehose", "Echo"));
            self.inner.unary(req, path, codec).await
        }

        pub async fn subscribe(
            &mut self,
            request: impl tonic::IntoRequest<SubscribeRequest>,
        ) -> Result<tonic::Response<tonic::codec::Streaming<Chunk>>, tonic::Status> {
            self.inner
                .ready()
                .await
                .map_err(|e| tonic::Status::unknown(format!("Service was not ready: {}", e.into())))?;
            let codec = tonic_prost::ProstCodec::default();
            let path = http::uri::PathAndQuery::from_static("/firehose.Firehose/Subscribe");
            let mut req = request.into_request();
            req.extensions_mut().insert(tonic::GrpcMethod::new("firehose.Firehose", "Subscribe"));
            self.inner.server_streaming(req, path, codec).await
        }
    }
}

pub mod firehose_server {
    use super::*;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    /// Generated trait containing gRPC methods that should be implemented
    /// for use with FirehoseServer.
    pub trait Firehose: Send + Sync + 'static {
        fn echo(
            &self,
            request: tonic::Request<EchoRequest>,
        ) -> impl std::future::Future<Output = Result<tonic::Response<EchoReply>, tonic::Status>> + Send;

        /// Server streaming response type for the Subscribe method.
        type SubscribeStream: tokio_stream::Stream<Item = Result<Chunk, tonic::Status>> + Send + 'static;

        fn subscribe(
            &self,
            request: tonic::Request<SubscribeRequest>,
        ) -> impl std::future::Future<Output = Result<tonic::Response<Self::SubscribeStream>, tonic::Status>> + Send;
    }

    #[derive(Debug)]
    pub struct FirehoseServer<T> {
        inner: Arc<T>,
    }

    impl<T> FirehoseServer<T> {
        pub fn new(inner: T) -> Self {
            Self { inner: Arc::new(inner) }
        }
    }

    impl<T> Clone for FirehoseServer<T> {
        fn clone(&self) -> Self {
            Self { inner: Arc::clone(&self.inner) }
        }
    }

    impl<T, B> tower::Service<http::Request<B>> for FirehoseServer<T>
    where
        T: Firehose,
        B: http_body::Body + Send + 'static,
        B::Error: Into<StdError> + Send + 'static,
    {
        type Response = http::Response<tonic::body::Body>;
        type Error = std::convert::Infallible;
        type Future = BoxFuture<Self::Response, Self::Error>;

        fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<B>) -> Self::Future {
            match req.uri().path() {
                "/firehose.Firehose/Echo" => {
                    struct EchoSvc<T: Firehose>(pub Arc<T>);
                    impl<T: Firehose> tonic::server::UnaryService<EchoRequest> for EchoSvc<T> {
                        type Response = EchoReply;
                        type Future = BoxFuture<tonic::Response<Self::Response>, tonic::Status>;
                        fn call(&mut self, request: tonic::Request<EchoRequest>) -> Self::Future {
                            let inner = Arc::clone(&self.0);
                            Box::pin(async move { inner.echo(request).await })
                        }
                    }
                    let inner = self.inner.clone();
                    Box::pin(async move {
                        let codec = tonic_prost::ProstCodec::default();
                        let mut grpc = tonic::server::Grpc::new(codec);
                        Ok(grpc.unary(EchoSvc(inner), req).await)
                    })
                }
                "/firehose.Firehose/Subscribe" => {
                    struct SubscribeSvc<T: Firehose>(pub Arc<T>);
                    impl<T: Firehose> tonic::server::ServerStreamingService<SubscribeRequest> for SubscribeSvc<T> {
                        type Response = Chunk;
                        type ResponseStream = T::SubscribeStream;
                        type Future = BoxFuture<tonic::Response<Self::ResponseStream>, tonic::Status>;
                        fn call(&mut self, request: tonic::Request<SubscribeRequest>) -> Self::Future {
                            let inner = Arc::clone(&self.0);
                            Box::pin(async move { inner.subscribe(request).await })
                        }
                    }
                    let inner = self.inner.clone();
                    Box::pin(async move {
                        let codec = tonic_prost::ProstCodec::default();
                        let mut grpc = tonic::server::Grpc::new(codec);
                        Ok(grpc.server_streaming(SubscribeSvc(inner), req).await)
                    })
                }
                _ => Box::pin(async move { Ok(tonic::Status::unimplemented("no such method").into_http()) }),
            }
        }
    }

    impl<T> tonic::server::NamedService for FirehoseServer<T> {
        const NAME: &'static str = "firehose.Firehose";
    }
}
