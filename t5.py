import socket,sys
s=socket.create_connection(("127.0.0.1",28115)); s.settimeout(10)
def cmd(b,term=b"\r\n"):
    s.sendall(b); r=b""
    while not r.endswith(term): r+=s.recv(1<<20)
    return r
big=b"x"*600000
print(cmd(b"set bigA 0 0 %d\r\n"%len(big)+big+b"\r\n"))
st=cmd(b"stats items\r\n",b"END\r\n").decode()
print([l for l in st.split("\r\n") if ":number " in l])
sl=cmd(b"stats slabs\r\n",b"END\r\n").decode()
print([l for l in sl.split("\r\n") if "chunk_size" in l][:12])
