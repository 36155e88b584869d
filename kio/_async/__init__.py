"""The async engine (one network task per client) and the clients it drives;
kio.aio (asyncio) and kio.trio are its public faces."""
