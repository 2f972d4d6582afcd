// This page registers no service worker. A browser that ran llama-server's web UI on this origin
// still has that UI's worker, which keeps showing the old UI from its cache; when it checks for an
// update it fetches this file, which removes the worker and its caches and reloads the open tabs.
// (llama-server answers /sw.js the same way whenever its own UI is not served.)
self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (e) => e.waitUntil((async () => {
    await self.registration.unregister();
    for (const key of await caches.keys()) await caches.delete(key);
    for (const c of await self.clients.matchAll({ type: 'window' })) c.navigate(c.url);
})()));
