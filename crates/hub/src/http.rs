//! The HTTP client: HTTPS trusting the operating system's certificate store (so a corporate
//! proxy's root, installed there or named by `SSL_CERT_FILE`, is trusted), the proxy from
//! `HTTPS_PROXY` and friends, redirects followed.

use std::io::Read;
use std::time::Duration;

use ureq::tls::{Certificate, RootCerts, TlsConfig};
use ureq::{Agent, ResponseExt};

use crate::HubError;

/// A successful response whose body is still to be read.
pub(crate) struct Fetched {
    /// The URL that answered, after redirects: relative links resolve against it.
    pub final_url: String,
    pub content_type: Option<String>,
    pub content_length: Option<u64>,
    pub body: Box<dyn Read + Send>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Head,
    Get,
}

/// Any response, its status not yet judged.
pub(crate) struct Answer {
    pub status: u16,
    /// The URL that answered, after the redirects that were followed.
    pub final_url: String,
    pub headers: ureq::http::HeaderMap,
    pub body: Box<dyn Read + Send>,
}

impl Answer {
    /// A header's value when it is present and readable text, trimmed.
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }
}

pub(crate) struct Client {
    proxied: Agent,
    /// For loopback hosts, which a proxy cannot reach on our behalf.
    direct: Agent,
    /// Why no root certificate was found, when none was; HTTPS is refused then.
    missing_roots: Option<String>,
}

impl Client {
    pub(crate) fn new() -> Client {
        let (roots, missing_roots) = native_roots();
        let build = |proxy: Option<ureq::Proxy>| -> Agent {
            Agent::config_builder()
                .tls_config(TlsConfig::builder().root_certs(roots.clone()).build())
                .proxy(proxy)
                // Statuses are mapped to our own errors, naming the URL.
                .http_status_as_error(false)
                .max_redirects(10)
                .timeout_connect(Some(Duration::from_secs(30)))
                .timeout_recv_response(Some(Duration::from_secs(60)))
                // An idle limit, not a total one: the wheel is ~100 MB on any link speed.
                .timeout_per_read(Some(Duration::from_secs(60)))
                .user_agent(concat!("oxibonsai/", env!("CARGO_PKG_VERSION")))
                .build()
                .into()
        };
        Client {
            proxied: build(ureq::Proxy::try_from_env()),
            direct: build(None),
            missing_roots,
        }
    }

    /// The agent for `url`: direct for loopback hosts, refused for HTTPS without roots.
    fn agent_for(&self, url: &str) -> Result<&Agent, HubError> {
        let parsed = url::Url::parse(url).map_err(|e| HubError::Network {
            url: url.to_owned(),
            error: Box::new(e),
        })?;
        if parsed.scheme() == "https" {
            if let Some(reason) = &self.missing_roots {
                return Err(HubError::NoRootCertificates {
                    reason: reason.clone(),
                });
            }
        }
        Ok(if is_loopback(&parsed) {
            &self.direct
        } else {
            &self.proxied
        })
    }

    /// A request whose status the caller interprets (the Hub's API speaks through statuses and
    /// headers): `headers` are added, and redirects are followed only when `follow_redirects`.
    pub(crate) fn call(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        follow_redirects: bool,
    ) -> Result<Answer, HubError> {
        let agent = self.agent_for(url)?;
        let mut request = match method {
            Method::Head => agent.head(url),
            Method::Get => agent.get(url),
        };
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        if !follow_redirects {
            request = request.config().max_redirects(0).build();
        }
        let response = request.call().map_err(|e| HubError::Network {
            url: url.to_owned(),
            error: Box::new(e),
        })?;
        let final_url = response.get_uri().to_string();
        let status = response.status().as_u16();
        let (parts, body) = response.into_parts();
        Ok(Answer {
            status,
            final_url,
            headers: parts.headers,
            body: Box::new(body.into_reader()),
        })
    }

    /// GET `url`; any status but 2xx (after redirects) is [`HubError::Http`].
    pub(crate) fn get(&self, url: &str, accept: Option<&str>) -> Result<Fetched, HubError> {
        let network = |error: Box<dyn std::error::Error + Send + Sync>| HubError::Network {
            url: url.to_owned(),
            error,
        };
        let agent = self.agent_for(url)?;
        let mut request = agent.get(url);
        if let Some(accept) = accept {
            request = request.header("Accept", accept);
        }
        let response = request.call().map_err(|e| network(Box::new(e)))?;
        let final_url = response.get_uri().to_string();
        let status = response.status().as_u16();
        if !response.status().is_success() {
            return Err(HubError::Http {
                url: final_url,
                status,
            });
        }
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let content_type = header("content-type");
        let content_length = header("content-length").and_then(|v| v.trim().parse().ok());
        Ok(Fetched {
            final_url,
            content_type,
            content_length,
            body: Box::new(response.into_body().into_reader()),
        })
    }
}

fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// The operating system's roots (`rustls-native-certs` also reads `SSL_CERT_FILE` / `SSL_CERT_DIR`).
/// Unreadable entries are skipped as long as some root loads; the second value says why none did.
pub fn native_roots() -> (RootCerts, Option<String>) {
    let loaded = rustls_native_certs::load_native_certs();
    let certs: Vec<Certificate<'static>> = loaded
        .certs
        .iter()
        .map(|der| Certificate::from_der(der.as_ref()).to_owned())
        .collect();
    for error in &loaded.errors {
        tracing::debug!("skipping unreadable root certificate: {error}");
    }
    let missing = certs.is_empty().then(|| {
        if loaded.errors.is_empty() {
            "the store is empty".to_owned()
        } else {
            let errors: Vec<String> = loaded.errors.iter().map(|e| e.to_string()).collect();
            errors.join("; ")
        }
    });
    (RootCerts::new_with_certs(&certs), missing)
}
